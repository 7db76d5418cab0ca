//! A store's URL, checked before connecting: a bad one is the operator's input, and
//! its message never repeats it (it may hold a password).

use std::str::FromStr;

/// Whether `url` is a store's URL (`postgres://…`, `sqlite://…`), else why not.
pub(crate) fn check_url(url: &str) -> Result<(), String> {
    let parsed = match url.split_once("://").map(|(scheme, _)| scheme) {
        Some("postgres" | "postgresql") => {
            sqlx::postgres::PgConnectOptions::from_str(url).map(drop)
        }
        Some("sqlite") => sqlx::sqlite::SqliteConnectOptions::from_str(url).map(drop),
        _ => return Err("not a postgres:// or sqlite:// URL".into()),
    };
    parsed.map_err(|e| match e {
        sqlx::Error::Configuration(why) => format!("not a database URL: {why}"),
        _ => "not a database URL".into(),
    })
}
