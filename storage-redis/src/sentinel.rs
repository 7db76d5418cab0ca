//! Redis Sentinel: the `redis+sentinel://` URL form, and finding the current primary by
//! asking the sentinels it names. The connections ([`Reconnecting`](crate::Reconnecting),
//! [`ReconnectingAsync`](crate::ReconnectingAsync)) ask again each time they reconnect,
//! and confirm with `ROLE` that the server they reach is the primary.

use std::io;

use redis::{Client, Cmd, Pipeline, RedisConnectionInfo, RedisError, RedisResult, Value};

/// The port sentinels listen on when the URL names none.
pub const DEFAULT_SENTINEL_PORT: u16 = 26379;

/// Why a `redis+sentinel://` URL was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SentinelUrlError {
    /// The URL does not start with `redis+sentinel://` or `rediss+sentinel://` (the
    /// scheme it has, or the start of the URL, never its credentials).
    #[error("{0:?} is not redis+sentinel:// or rediss+sentinel://")]
    Scheme(String),
    /// No sentinel is named before the master name.
    #[error("the URL names no sentinel (HOST:PORT[,HOST:PORT...])")]
    NoSentinel,
    /// A sentinel's host is empty.
    #[error("sentinel {0:?} has no host")]
    Host(String),
    /// A sentinel's port is not a number from 1 to 65535.
    #[error("sentinel {0:?} has no valid port (1 to 65535)")]
    Port(String),
    /// The path names no master (`/MASTER_NAME`).
    #[error("the URL names no master: add /MASTER_NAME after the sentinels")]
    NoMaster,
    /// The database after the master name is not a non-negative number.
    #[error("database {0:?} is not a non-negative number")]
    Db(String),
    /// Something follows the database, or the URL has a query or fragment.
    #[error("unexpected {0:?} after /MASTER_NAME[/DB]")]
    Trailing(String),
    /// A `%` not followed by two hexadecimal digits, or an escape that is not UTF-8, in
    /// the user or the password (named, never quoted).
    #[error("bad percent-encoding in the {0}")]
    Escape(&'static str),
    /// `NAME@` with no `:`: a user cannot authenticate without a password, and a
    /// password alone is written `:PASSWORD@`.
    #[error("the credentials need a colon: USER:PASSWORD@ or :PASSWORD@")]
    UserWithoutPassword,
}

/// A parsed `redis+sentinel://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...]/MASTER_NAME[/DB]`
/// (or `rediss+sentinel://`: TLS to the sentinels and to the primary). The credentials
/// and database are the primary's; the sentinels are asked without `AUTH`.
#[derive(Clone, PartialEq, Eq)]
pub struct Sentinel {
    sentinels: Vec<String>,
    master: String,
    db: i64,
    username: Option<String>,
    password: Option<String>,
    tls: bool,
    ca_pem: Option<Vec<u8>>,
}

impl std::fmt::Debug for Sentinel {
    // Never prints the password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sentinel")
            .field("sentinels", &self.sentinels)
            .field("master", &self.master)
            .field("db", &self.db)
            .field("username", &self.username)
            .field("tls", &self.tls)
            .finish()
    }
}

impl std::fmt::Display for Sentinel {
    /// `primary "NAME" (sentinels A,B)`: what error messages call the target.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let sentinels = self.sentinels.join(",");
        write!(f, "primary {:?} (sentinels {sentinels})", self.master)
    }
}

/// Whether `url` is in the Sentinel form (the scheme decides; the rest may be bad).
pub(crate) fn is_sentinel_url(url: &str) -> bool {
    url.starts_with("redis+sentinel://") || url.starts_with("rediss+sentinel://")
}

impl Sentinel {
    /// Parses a `redis+sentinel://` or `rediss+sentinel://` URL. A sentinel without a
    /// port listens on [`DEFAULT_SENTINEL_PORT`]; user and password may be
    /// percent-encoded.
    pub fn parse(url: &str) -> Result<Self, SentinelUrlError> {
        let (tls, rest) = if let Some(rest) = url.strip_prefix("redis+sentinel://") {
            (false, rest)
        } else if let Some(rest) = url.strip_prefix("rediss+sentinel://") {
            (true, rest)
        } else {
            let scheme = url.split_once("://").map_or(url, |(scheme, _)| scheme);
            let scheme: String = scheme.chars().take(20).collect();
            return Err(SentinelUrlError::Scheme(scheme));
        };
        if let Some(at) = rest.find(['?', '#']) {
            return Err(SentinelUrlError::Trailing(rest[at..].to_owned()));
        }
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        let (credentials, hosts) = match authority.rsplit_once('@') {
            Some((credentials, hosts)) => (Some(credentials), hosts),
            None => (None, authority),
        };
        let (username, password) = match credentials.map(|c| c.split_once(':')) {
            None => (None, None),
            Some(None) => return Err(SentinelUrlError::UserWithoutPassword),
            Some(Some((user, password))) => {
                let user = (!user.is_empty())
                    .then(|| decode(user, "user"))
                    .transpose()?;
                (user, Some(decode(password, "password")?))
            }
        };
        let sentinels = hosts
            .split(',')
            .filter(|host| !host.is_empty())
            .map(sentinel_address)
            .collect::<Result<Vec<_>, _>>()?;
        if sentinels.is_empty() {
            return Err(SentinelUrlError::NoSentinel);
        }
        let mut segments = path.splitn(3, '/');
        let master = segments.next().unwrap_or_default();
        if master.is_empty() {
            return Err(SentinelUrlError::NoMaster);
        }
        let db = match segments.next().unwrap_or_default() {
            "" => 0,
            db => db
                .parse::<i64>()
                .ok()
                .filter(|db| *db >= 0)
                .ok_or_else(|| SentinelUrlError::Db(db.to_owned()))?,
        };
        if let Some(trailing) = segments.next().filter(|t| !t.is_empty()) {
            return Err(SentinelUrlError::Trailing(trailing.to_owned()));
        }
        Ok(Self {
            sentinels,
            master: master.to_owned(),
            db,
            username,
            password,
            tls,
            ca_pem: None,
        })
    }

    /// Trusts exactly the certificate authorities in `ca_pem` (PEM) for TLS, as
    /// [`client`](crate::client) does.
    pub fn with_ca(mut self, ca_pem: &[u8]) -> Self {
        self.ca_pem = Some(ca_pem.to_vec());
        self
    }

    /// The sentinels' addresses, `HOST:PORT`, in the order they are asked.
    pub fn sentinels(&self) -> &[String] {
        &self.sentinels
    }

    /// The master name the sentinels monitor.
    pub fn master(&self) -> &str {
        &self.master
    }

    /// The database selected on the primary.
    pub fn db(&self) -> i64 {
        self.db
    }

    /// The primary's user, if the URL names one.
    pub fn username(&self) -> Option<&str> {
        self.username.as_deref()
    }

    /// Whether the sentinels and the primary are reached over TLS.
    pub fn tls(&self) -> bool {
        self.tls
    }

    /// A client for the server at `address` (`HOST:PORT`), TLS as the URL says, that
    /// sends nothing on connecting (no `CLIENT SETINFO`): the one handshake is ours.
    pub(crate) fn client(&self, address: &str) -> RedisResult<Client> {
        let scheme = if self.tls { "rediss" } else { "redis" };
        let url = format!("{scheme}://{address}/");
        let client = crate::client::client(&url, self.ca_pem.as_deref())
            .map_err(|e| RedisError::from(io::Error::other(e.to_string())))?;
        let bare = client
            .get_connection_info()
            .clone()
            .set_redis_settings(RedisConnectionInfo::default().set_skip_set_lib_name());
        Client::open(bare)
    }

    /// What the primary is sent on connecting: `AUTH`, `SELECT`, then `ROLE`, whose
    /// reply [`check_handshake`](Self::check_handshake) reads.
    pub(crate) fn handshake(&self) -> Pipeline {
        let mut pipe =
            crate::client::handshake(self.username.as_deref(), self.password.as_deref(), self.db);
        pipe.cmd("ROLE");
        pipe
    }

    /// The `SENTINEL get-master-addr-by-name` request.
    pub(crate) fn ask(&self) -> Cmd {
        let mut ask = redis::cmd("SENTINEL");
        ask.arg("get-master-addr-by-name").arg(&self.master);
        ask
    }

    /// The primary's `HOST:PORT` from a sentinel's answer to [`ask`](Self::ask).
    pub(crate) fn answer(&self, sentinel: &str, reply: Value) -> RedisResult<String> {
        let reply = reply.extract_error()?;
        match redis::from_redis_value::<Option<(String, u16)>>(reply) {
            Ok(Some((host, port))) if host.contains(':') => Ok(format!("[{host}]:{port}")),
            Ok(Some((host, port))) => Ok(format!("{host}:{port}")),
            Ok(None) => Err(unavailable(format!(
                "sentinel {sentinel} monitors no master named {:?}",
                self.master
            ))),
            Err(e) => Err(unavailable(format!(
                "sentinel {sentinel} answered with no address: {e}"
            ))),
        }
    }

    /// Checks the replies to [`handshake`](Self::handshake) from `address`: no error,
    /// and a `ROLE` of `master`, so no request ever goes to a replica.
    pub(crate) fn check_handshake(&self, address: &str, replies: Vec<Value>) -> RedisResult<()> {
        let mut role = None;
        for reply in replies {
            role = Some(reply.extract_error()?);
        }
        match role {
            Some(Value::Array(items)) if matches!(items.first(), Some(Value::BulkString(r)) if r == b"master") => {
                Ok(())
            }
            _ => Err(unavailable(format!(
                "{address}, named by the sentinels as {:?}'s primary, is not a primary \
                 (a failover is under way)",
                self.master
            ))),
        }
    }

    /// The error after every sentinel failed, naming each one's failure.
    pub(crate) fn none_answered(&self, failures: &[String]) -> RedisError {
        unavailable(format!(
            "no sentinel named {:?}'s primary: {}",
            self.master,
            failures.join("; ")
        ))
    }
}

/// An error that counts as Redis being unavailable (an I/O error).
fn unavailable(message: String) -> RedisError {
    io::Error::other(message).into()
}

/// A sentinel's `HOST[:PORT]` checked, the port defaulted.
fn sentinel_address(text: &str) -> Result<String, SentinelUrlError> {
    // A bracketed IPv6 address keeps its colons inside the brackets.
    let (host, port) = match text.rfind(':') {
        Some(colon) if !text[colon..].contains(']') => (&text[..colon], Some(&text[colon + 1..])),
        _ => (text, None),
    };
    if host.is_empty() || host == "[]" {
        return Err(SentinelUrlError::Host(text.to_owned()));
    }
    let port = match port {
        None => DEFAULT_SENTINEL_PORT,
        Some(port) => port
            .parse::<u16>()
            .ok()
            .filter(|port| *port != 0)
            .ok_or_else(|| SentinelUrlError::Port(text.to_owned()))?,
    };
    Ok(format!("{host}:{port}"))
}

/// Percent-decodes `text`, the `part` (user or password) of the URL.
fn decode(text: &str, part: &'static str) -> Result<String, SentinelUrlError> {
    let bad = || SentinelUrlError::Escape(part);
    let mut bytes = Vec::with_capacity(text.len());
    let mut rest = text.as_bytes();
    while let Some((&byte, tail)) = rest.split_first() {
        rest = tail;
        if byte != b'%' {
            bytes.push(byte);
            continue;
        }
        let hex = rest.get(..2).ok_or_else(bad)?;
        let hex = std::str::from_utf8(hex).map_err(|_| bad())?;
        bytes.push(u8::from_str_radix(hex, 16).map_err(|_| bad())?);
        rest = &rest[2..];
    }
    String::from_utf8(bytes).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(url: &str) -> Result<Sentinel, SentinelUrlError> {
        Sentinel::parse(url)
    }

    #[test]
    fn the_full_form() {
        let s = parse("rediss+sentinel://app:s%40cret@a:1,b:2,[::1]:3/main/4").unwrap();
        assert_eq!(s.sentinels(), ["a:1", "b:2", "[::1]:3"]);
        assert_eq!(s.master(), "main");
        assert_eq!(s.db(), 4);
        assert_eq!(s.username(), Some("app"));
        assert_eq!(s.password.as_deref(), Some("s@cret"));
        assert!(s.tls());
        assert!(
            !format!("{s:?}").contains("cret"),
            "Debug hides the password"
        );
        assert_eq!(
            s.to_string(),
            r#"primary "main" (sentinels a:1,b:2,[::1]:3)"#
        );
    }

    #[test]
    fn the_short_form_defaults() {
        let s = parse("redis+sentinel://host/main").unwrap();
        assert_eq!(s.sentinels(), ["host:26379"]);
        assert_eq!(
            (s.db(), s.username(), s.password.as_deref()),
            (0, None, None)
        );
        assert!(!s.tls());
        assert_eq!(parse("redis+sentinel://host/main/").unwrap().db(), 0);
        let password_only = parse("redis+sentinel://:pw@h:1/m").unwrap();
        assert_eq!(password_only.username(), None);
        assert_eq!(password_only.password.as_deref(), Some("pw"));
        // An empty entry between commas is skipped.
        let s = parse("redis+sentinel://a:1,,b:2,/m").unwrap();
        assert_eq!(s.sentinels(), ["a:1", "b:2"]);
    }

    #[test]
    fn every_bad_part_is_named() {
        use SentinelUrlError::*;
        let cases = [
            ("redis://u:pw@h:1/m", Scheme("redis".into())),
            ("sentinel://h/m", Scheme("sentinel".into())),
            ("h:1/m", Scheme("h:1/m".into())),
            ("redis+sentinel:///m", NoSentinel),
            ("redis+sentinel://u:p@/m", NoSentinel),
            ("redis+sentinel://:1/m", Host(":1".into())),
            ("redis+sentinel://h:x/m", Port("h:x".into())),
            ("redis+sentinel://h:0/m", Port("h:0".into())),
            ("redis+sentinel://h:70000/m", Port("h:70000".into())),
            ("redis+sentinel://h:1", NoMaster),
            ("redis+sentinel://h:1/", NoMaster),
            ("redis+sentinel://h:1//3", NoMaster),
            ("redis+sentinel://h:1/m/x", Db("x".into())),
            ("redis+sentinel://h:1/m/-1", Db("-1".into())),
            ("redis+sentinel://h:1/m/1/2", Trailing("2".into())),
            ("redis+sentinel://h:1/m?db=1", Trailing("?db=1".into())),
            ("redis+sentinel://h:1/m#f", Trailing("#f".into())),
            ("redis+sentinel://u:%zz@h/m", Escape("password")),
            ("redis+sentinel://u:%4@h/m", Escape("password")),
            ("redis+sentinel://u:%ff@h/m", Escape("password")),
            ("redis+sentinel://%@h/m", UserWithoutPassword),
            ("redis+sentinel://%:p@h/m", Escape("user")),
            ("redis+sentinel://secret@h/m", UserWithoutPassword),
        ];
        for (url, expected) in cases {
            assert_eq!(parse(url), Err(expected), "{url}");
        }
        // Every error reads as a sentence naming the part.
        assert!(parse("redis+sentinel://h:x/m")
            .unwrap_err()
            .to_string()
            .contains("\"h:x\""));
    }

    #[test]
    fn odd_input_never_panics() {
        for url in [
            "redis+sentinel://",
            "redis+sentinel://@",
            "redis+sentinel://:@:/",
            "redis+sentinel://[",
            "redis+sentinel://[]:1/m",
            "redis+sentinel://h:1/m/%",
            "rediss+sentinel://\u{e9}:\u{e9}@\u{e9}/\u{e9}/\u{e9}",
            "redis+sentinel://u:p%@h/m",
        ] {
            let _ = parse(url);
        }
    }

    fn sentinel() -> Sentinel {
        parse("redis+sentinel://127.0.0.1:1/main").unwrap()
    }

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn a_sentinels_answer_is_an_address_or_says_why_not() {
        let s = sentinel();
        let reply = Value::Array(vec![bulk("10.0.0.1"), bulk("6380")]);
        assert_eq!(s.answer("x", reply).unwrap(), "10.0.0.1:6380");
        let v6 = Value::Array(vec![bulk("::1"), bulk("6380")]);
        assert_eq!(s.answer("x", v6).unwrap(), "[::1]:6380");
        let none = s.answer("x", Value::Nil).unwrap_err();
        assert!(none.is_io_error() && none.to_string().contains("no master named"));
        assert!(s.answer("x", bulk("what")).unwrap_err().is_io_error());
    }

    #[test]
    fn only_a_master_role_passes_the_handshake() {
        let s = sentinel();
        let master = Value::Array(vec![bulk("master"), Value::Int(0), Value::Array(vec![])]);
        assert!(s.check_handshake("p", vec![Value::Okay, master]).is_ok());
        let replica = Value::Array(vec![bulk("slave"), bulk("127.0.0.1"), Value::Int(1)]);
        let refused = s.check_handshake("p", vec![replica]).unwrap_err();
        assert!(refused.is_io_error() && refused.to_string().contains("not a primary"));
        assert!(s.check_handshake("p", vec![]).is_err());
    }
}
