//! Starting a store: the first admin's name is checked as any user's, and the embedded
//! store's files are for the server's user only.

use sluicegate_server::{init_admin, Config, Error};

#[tokio::test]
async fn the_first_admin_name_is_checked_as_any_user_name() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let config = Config {
        data_dir: dir.path().join("data"),
        ..Config::default()
    };
    for bad in ["", "two\nlines", "a b", &"x".repeat(300)] {
        let refused = init_admin(&config, bad).await;
        assert!(
            matches!(refused, Err(Error::AdminName(_))),
            "{bad:?}: {refused:?}"
        );
    }
    init_admin(&config, "root").await.expect("a valid name");
}

/// An embedded store in a temporary directory (kept while the first value lives), its
/// data directory, and its first admin `root` made.
async fn with_first_admin() -> (tempfile::TempDir, std::path::PathBuf, Config) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let data = dir.path().join("data");
    let config = Config {
        data_dir: data.clone(),
        ..Config::default()
    };
    init_admin(&config, "root").await.expect("first admin");
    (dir, data, config)
}

#[cfg(unix)]
#[tokio::test]
async fn the_embedded_store_is_created_private() {
    use std::os::unix::fs::PermissionsExt;
    let (_dir, data, _) = with_first_admin().await;
    let mode = |path: &std::path::Path| {
        std::fs::metadata(path)
            .expect("exists")
            .permissions()
            .mode()
            & 0o777
    };
    assert_eq!(mode(&data), 0o700);
    assert_eq!(mode(&data.join("sluicegate.db")), 0o600);
}

/// Turns the store at `url` back into one written under the product's working name
/// (tables `tollgate_*`).
async fn rename_tables_back(url: &str) {
    use sqlx::{AnyConnection, Connection};
    sqlx::any::install_default_drivers();
    let mut con = AnyConnection::connect(url).await.expect("open");
    for table in ["meta", "policies", "apps", "users", "audit"] {
        sqlx::query(&format!(
            "ALTER TABLE sluicegate_{table} RENAME TO tollgate_{table}"
        ))
        .execute(&mut con)
        .await
        .expect("rename back");
    }
    con.close().await.expect("close");
}

/// The admin made before the rename is still there: a second first admin is refused.
async fn assert_adopted(config: &Config) {
    let again = init_admin(config, "other").await;
    assert!(
        matches!(again, Err(Error::AdminExists)),
        "the store was not adopted: {again:?}"
    );
}

/// A store written under the product's working name (`tollgate.db`, tables
/// `tollgate_*`) is adopted whole: its file and tables renamed, its users kept.
#[tokio::test]
async fn a_store_written_under_the_working_name_keeps_its_data() {
    let (_dir, data, config) = with_first_admin().await;
    rename_tables_back(&format!(
        "sqlite://{}",
        data.join("sluicegate.db").display()
    ))
    .await;
    std::fs::rename(data.join("sluicegate.db"), data.join("tollgate.db")).expect("rename file");
    assert_adopted(&config).await;
    assert!(data.join("sluicegate.db").exists() && !data.join("tollgate.db").exists());
}

/// The same on PostgreSQL.
#[tokio::test]
async fn a_postgres_store_written_under_the_working_name_keeps_its_data() {
    let pg = crate::common::Postgres::start();
    let config = Config {
        store: Some(pg.url()),
        ..Config::default()
    };
    init_admin(&config, "root").await.expect("first admin");
    rename_tables_back(&pg.url()).await;
    assert_adopted(&config).await;
}
