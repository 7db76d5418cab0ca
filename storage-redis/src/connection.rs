//! Connections that give up within a timeout, say what happened, and reconnect when
//! Redis is back.

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{
    Client, Cmd, Connection, ConnectionLike, ErrorKind, Pipeline, RedisError, RedisFuture,
    RedisResult, Value,
};

/// How long a call waits, connecting and for its reply together, before reporting
/// [`Error::Unavailable`](crate::Error::Unavailable).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(250);

/// A synchronous connection that connects on first use and after a failure. Each
/// request, connecting included, gets one deadline `timeout` away: it never waits longer,
/// and never retries. Failures say what happened (`no reply from 127.0.0.1:6379 within
/// 250 ms`, `127.0.0.1:6379 refused the connection`, or, for a server that does not speak
/// Redis's protocol, [`Error::NotRedis`](crate::Error::NotRedis)).
pub struct Reconnecting {
    /// The server's address with no handshake: connecting is one TCP connect.
    bare: Client,
    /// The handshake (`AUTH`, `SELECT`) sent after connecting, under the deadline.
    handshake: Option<Pipeline>,
    server: String,
    timeout: Duration,
    con: Option<Connection>,
}

impl std::fmt::Debug for Reconnecting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reconnecting")
            .field("server", &self.server)
            .field("timeout", &self.timeout)
            .field("connected", &self.con.is_some())
            .finish()
    }
}

impl Reconnecting {
    /// A connection to `client`'s server with [`DEFAULT_TIMEOUT`], speaking RESP2 and
    /// authenticating and selecting the database `client` names.
    pub fn new(client: Client) -> Self {
        let info = client.get_connection_info();
        let settings = info.redis_settings();
        let mut handshake = redis::pipe();
        if let Some(password) = settings.password() {
            let auth = handshake.cmd("AUTH");
            if let Some(user) = settings.username() {
                auth.arg(user);
            }
            auth.arg(password);
        }
        if settings.db() != 0 {
            handshake.cmd("SELECT").arg(settings.db());
        }
        let bare = info
            .clone()
            .set_redis_settings(redis::RedisConnectionInfo::default().set_skip_set_lib_name());
        Self {
            server: info.addr().to_string(),
            // A `ConnectionInfo` is always a valid target: this only re-wraps it.
            bare: Client::open(bare).unwrap_or(client),
            handshake: (!handshake.is_empty()).then_some(handshake),
            timeout: DEFAULT_TIMEOUT,
            con: None,
        }
    }

    /// Sets the longest a request may take, connecting included.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self.con = None;
        self
    }

    /// Sends `bytes`, holding `replies` commands, and reads their replies, all before
    /// one deadline (redis-rs would wait the timeout once per reply).
    fn request(&mut self, bytes: &[u8], replies: usize) -> RedisResult<Vec<Value>> {
        let deadline = Instant::now() + self.timeout;
        let result = self.within(deadline, bytes, replies);
        // After a timeout, a broken pipe or bytes that are not a reply, the stream's
        // position is unknown: start over.
        if let Err(e) = &result {
            if e.is_io_error()
                || e.is_timeout()
                || e.is_connection_dropped()
                || e.kind() == ErrorKind::Parse
            {
                self.con = None;
            }
        }
        result.map_err(|e| describe(&self.server, self.timeout, e))
    }

    fn within(
        &mut self,
        deadline: Instant,
        bytes: &[u8],
        replies: usize,
    ) -> RedisResult<Vec<Value>> {
        let con = match &mut self.con {
            Some(con) => con,
            empty => {
                let mut con = self.bare.get_connection_with_timeout(self.timeout)?;
                if let Some(handshake) = &self.handshake {
                    exchange(
                        &mut con,
                        deadline,
                        &handshake.get_packed_pipeline(),
                        handshake.len(),
                    )?
                    .into_iter()
                    .try_for_each(|reply| reply.extract_error().map(drop))?;
                }
                empty.insert(con)
            }
        };
        exchange(con, deadline, bytes, replies)
    }
}

/// Sends `bytes` on `con` and reads `replies` replies, giving up at `deadline`.
fn exchange(
    con: &mut Connection,
    deadline: Instant,
    bytes: &[u8],
    replies: usize,
) -> RedisResult<Vec<Value>> {
    let left = || {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            Err(RedisError::from(io::Error::from(io::ErrorKind::TimedOut)))
        } else {
            Ok(left)
        }
    };
    // Sending may read too: a TLS handshake waits for the server's hello.
    let first = left()?;
    con.set_write_timeout(Some(first))?;
    con.set_read_timeout(Some(first))?;
    con.send_packed_command(bytes)?;
    let mut values = Vec::with_capacity(replies);
    while values.len() < replies {
        con.set_read_timeout(Some(left()?))?;
        match con.recv_response()? {
            // RESP3 may put pushed data between replies.
            Value::Push { .. } => {}
            value => values.push(value),
        }
    }
    Ok(values)
}

/// Rewords a failure talking to `server` so it says what happened.
fn describe(server: &str, timeout: Duration, error: RedisError) -> RedisError {
    let ms = timeout.as_millis();
    if error.is_timeout() {
        io::Error::new(
            io::ErrorKind::TimedOut,
            format!("no reply from {server} within {ms} ms"),
        )
        .into()
    } else if error.is_connection_refusal() {
        io::Error::new(
            io::ErrorKind::ConnectionRefused,
            format!("{server} refused the connection"),
        )
        .into()
    } else if error.kind() == ErrorKind::Parse {
        let detail = format!("{server} answered with something other than Redis's protocol");
        RedisError::from((ErrorKind::Parse, "not a Redis server", detail))
    } else {
        error
    }
}

impl ConnectionLike for Reconnecting {
    fn req_packed_command(&mut self, cmd: &[u8]) -> RedisResult<Value> {
        let value = self
            .request(cmd, 1)?
            .pop()
            .ok_or_else(|| RedisError::from((ErrorKind::Client, "no reply")))?;
        value.extract_error()
    }

    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        // The first `offset` replies (a transaction's MULTI and QUEUED) are not returned.
        let mut values = self.request(cmd, offset + count)?;
        Ok(values.split_off(offset.min(values.len())))
    }

    fn get_db(&self) -> i64 {
        self.con.as_ref().map_or(0, ConnectionLike::get_db)
    }

    fn check_connection(&mut self) -> bool {
        let ping = redis::cmd("PING").get_packed_command();
        self.req_packed_command(&ping).is_ok()
    }

    fn is_open(&self) -> bool {
        self.con.as_ref().is_some_and(ConnectionLike::is_open)
    }
}

/// An asynchronous connection (tokio): a [`ConnectionManager`] that connects lazily and
/// reconnects in the background, with each request, connecting and reconnecting
/// included, bounded by one timeout and its failures worded like [`Reconnecting`]'s.
/// Clones share the connection.
#[derive(Clone)]
pub struct ReconnectingAsync {
    inner: ConnectionManager,
    server: Arc<str>,
    timeout: Duration,
}

impl std::fmt::Debug for ReconnectingAsync {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReconnectingAsync")
            .field("server", &self.server)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl ReconnectingAsync {
    /// `request` on a clone of the manager (they share one connection), given up after
    /// the timeout.
    async fn bounded<T, F: std::future::Future<Output = RedisResult<T>>>(
        &self,
        request: impl FnOnce(ConnectionManager) -> F,
    ) -> RedisResult<T> {
        match tokio::time::timeout(self.timeout, request(self.inner.clone())).await {
            Ok(result) => result.map_err(|e| describe(&self.server, self.timeout, e)),
            Err(_) => {
                let timed_out = io::Error::from(io::ErrorKind::TimedOut).into();
                Err(describe(&self.server, self.timeout, timed_out))
            }
        }
    }
}

impl redis::aio::ConnectionLike for ReconnectingAsync {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(self.bounded(move |mut con| async move { con.req_packed_command(cmd).await }))
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(self.bounded(move |mut con| async move {
            con.req_packed_commands(pipeline, offset, count).await
        }))
    }

    fn get_db(&self) -> i64 {
        self.inner.get_db()
    }
}

/// A client for `url`: `redis://` (plain TCP) or `rediss://` (TLS). With `ca_pem` (one or
/// more PEM certificates, such as a managed service's or a private CA's file), TLS trusts
/// exactly those certificate authorities instead of the system's. Give the client to
/// [`Reconnecting::new`] or [`connect_async`]; both then speak TLS.
///
/// TLS needs a rustls crypto provider: this installs ring's as the process's default
/// unless the application installed one.
///
/// A CA that is not PEM, or a `ca_pem` with a `redis://` URL (a certificate that would be
/// silently unused), is [`Error::Tls`](crate::Error::Tls); so is, on the first request,
/// a server whose certificate that CA did not sign.
pub fn client(url: &str, ca_pem: Option<&[u8]>) -> Result<Client, crate::error::Error> {
    use rustls::pki_types::{pem::PemObject, CertificateDer};

    let tls = |reason: String| crate::error::Error::Tls(reason);
    // redis's rustls support builds its configuration on the process's default crypto
    // provider; install ring's unless the application chose one.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let Some(ca_pem) = ca_pem else {
        return Client::open(url).map_err(crate::error::Error::Redis);
    };
    if !url.starts_with("rediss://") {
        return Err(tls(format!(
            "a CA certificate was given for {url}, which is not a rediss:// URL"
        )));
    }
    let certificates = CertificateDer::pem_slice_iter(ca_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| tls(format!("the CA certificate is not valid PEM: {e}")))?;
    if certificates.is_empty() {
        return Err(tls("the CA file holds no PEM certificate".to_owned()));
    }
    let certificates = redis::TlsCertificates {
        client_tls: None,
        root_cert: Some(ca_pem.to_vec()),
    };
    Client::build_with_tls(url, certificates).map_err(|e| tls(e.to_string()))
}

/// An asynchronous connection to `client`'s server (see [`ReconnectingAsync`]): no call
/// takes longer than `timeout`. Needs a tokio runtime with time enabled.
pub fn connect_async(client: Client, timeout: Duration) -> RedisResult<ReconnectingAsync> {
    let server = client.get_connection_info().addr().to_string().into();
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout))
        .set_number_of_retries(1)
        .set_max_delay(timeout);
    Ok(ReconnectingAsync {
        inner: ConnectionManager::new_lazy_with_config(client, config)?,
        server,
        timeout,
    })
}
