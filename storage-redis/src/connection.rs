//! Connections that give up within a timeout, say what happened, and reconnect when
//! Redis is back.

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::aio::{ConnectionManager, ConnectionManagerConfig, MultiplexedConnection};
use redis::{
    Client, Cmd, Connection, ConnectionLike, ErrorKind, Pipeline, RedisError, RedisFuture,
    RedisResult, Value,
};

use crate::client::{client, handshake};
use crate::sentinel::{is_sentinel_url, Sentinel};

/// How long a call waits, connecting and for its reply together, before reporting
/// [`Error::Unavailable`](crate::Error::Unavailable).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(250);

/// A synchronous connection that connects on first use and after a failure. Each
/// request, connecting included, gets one deadline `timeout` away: it never waits longer,
/// and never retries. Failures say what happened (`no reply from 127.0.0.1:6379 within
/// 250 ms`, `127.0.0.1:6379 refused the connection`, or, for a server that does not speak
/// Redis's protocol, [`Error::NotRedis`](crate::Error::NotRedis)).
pub struct Reconnecting {
    target: Target,
    server: String,
    timeout: Duration,
    con: Option<Connection>,
}

/// Where [`Reconnecting`] connects.
enum Target {
    /// One server. `bare` is its address with no handshake (connecting is one TCP
    /// connect); `handshake` (`AUTH`, `SELECT`) is sent after, under the deadline.
    Fixed {
        bare: Client,
        handshake: Option<Pipeline>,
    },
    /// The primary the sentinels name at each connect, confirmed by `ROLE`.
    Sentinel(Sentinel),
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
        let handshake = handshake(settings.username(), settings.password(), settings.db());
        let bare = info
            .clone()
            .set_redis_settings(redis::RedisConnectionInfo::default().set_skip_set_lib_name());
        let server = info.addr().to_string();
        Self::to(
            Target::Fixed {
                // A `ConnectionInfo` is always a valid target: this only re-wraps it.
                bare: Client::open(bare).unwrap_or(client),
                handshake: (!handshake.is_empty()).then_some(handshake),
            },
            server,
        )
    }

    /// A connection to the primary `sentinel` names, with [`DEFAULT_TIMEOUT`]: each
    /// connect asks the sentinels in turn (`SENTINEL get-master-addr-by-name`) and
    /// confirms with `ROLE` that the server is the primary, all within the request's
    /// deadline. After a failover the old primary's connection fails (closed, refused, or
    /// `READONLY` once it is a replica): the request reports
    /// [`Error::Unavailable`](crate::Error::Unavailable) and the next one finds the new
    /// primary.
    pub fn sentinel(sentinel: Sentinel) -> Self {
        let server = sentinel.to_string();
        Self::to(Target::Sentinel(sentinel), server)
    }

    /// A connection for `url`: `redis://`, `rediss://`, or the Sentinel forms
    /// `redis+sentinel://` and `rediss+sentinel://` (see [`Sentinel::parse`]), trusting the
    /// CA in `ca_pem` for TLS as [`client`](crate::client) does.
    pub fn open(url: &str, ca_pem: Option<&[u8]>) -> Result<Self, crate::Error> {
        if !is_sentinel_url(url) {
            return client(url, ca_pem).map(Self::new);
        }
        let sentinel = Sentinel::parse(url)?;
        Ok(Self::sentinel(match ca_pem {
            Some(ca_pem) => sentinel.with_ca(ca_pem),
            None => sentinel,
        }))
    }

    fn to(target: Target, server: String) -> Self {
        Self {
            target,
            server,
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
        // position is unknown: start over. After `READONLY` the server is a replica now:
        // connect again to find the primary.
        let broken = match &result {
            Ok(values) => values.iter().any(read_only),
            Err(e) => must_reconnect(e),
        };
        if broken {
            self.con = None;
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
            empty => empty.insert(open(&self.target, self.timeout, deadline)?),
        };
        exchange(con, deadline, bytes, replies)
    }
}

/// A connection to `target`, its handshake done, by `deadline`.
fn open(target: &Target, timeout: Duration, deadline: Instant) -> RedisResult<Connection> {
    match target {
        Target::Fixed { bare, handshake } => {
            let mut con = bare.get_connection_with_timeout(timeout)?;
            if let Some(handshake) = handshake {
                let packed = handshake.get_packed_pipeline();
                exchange(&mut con, deadline, &packed, handshake.len())?
                    .into_iter()
                    .try_for_each(|reply| reply.extract_error().map(drop))?;
            }
            Ok(con)
        }
        Target::Sentinel(sentinel) => {
            let address = discover(sentinel, deadline)?;
            let client = sentinel.client(&address)?;
            let mut con = client.get_connection_with_timeout(left(deadline)?)?;
            let handshake = sentinel.handshake();
            let packed = handshake.get_packed_pipeline();
            let replies = exchange(&mut con, deadline, &packed, handshake.len())?;
            sentinel.check_handshake(&address, replies)?;
            Ok(con)
        }
    }
}

/// The primary's address, from the first sentinel that names it; each sentinel gets an
/// equal share of the time left, so one that hangs leaves time for the others.
fn discover(sentinel: &Sentinel, deadline: Instant) -> RedisResult<String> {
    let ask = sentinel.ask().get_packed_command();
    let sentinels = sentinel.sentinels();
    let mut failures = Vec::new();
    for (i, address) in sentinels.iter().enumerate() {
        let share = share(left(deadline)?, sentinels.len() - i);
        let answer = (|| {
            let mut con = sentinel
                .client(address)?
                .get_connection_with_timeout(share)?;
            let reply = exchange(&mut con, Instant::now() + share, &ask, 1)?.pop();
            sentinel.answer(address, reply.unwrap_or(Value::Nil))
        })();
        match answer {
            Ok(primary) => return Ok(primary),
            Err(e) => failures.push(format!("{address}: {e}")),
        }
    }
    Err(sentinel.none_answered(&failures))
}

/// `time` split `ways` ways.
fn share(time: Duration, ways: usize) -> Duration {
    time / u32::try_from(ways.max(1)).unwrap_or(u32::MAX)
}

/// Whether `value` is a `READONLY` error: the server was demoted to a replica.
fn read_only(value: &Value) -> bool {
    matches!(value, Value::ServerError(e) if e.code() == "READONLY")
}

/// Whether a request failing with `error` leaves the connection unusable: its stream's
/// position is unknown, or its server is no longer the primary.
fn must_reconnect(error: &RedisError) -> bool {
    error.is_io_error()
        || error.is_timeout()
        || error.is_connection_dropped()
        || error.kind() == ErrorKind::Parse
        || error.code() == Some("READONLY")
}

/// The time left before `deadline`, or a timeout error once it passed.
fn left(deadline: Instant) -> RedisResult<Duration> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        Err(RedisError::from(io::Error::from(io::ErrorKind::TimedOut)))
    } else {
        Ok(left)
    }
}

/// Sends `bytes` on `con` and reads `replies` replies, giving up at `deadline`.
fn exchange(
    con: &mut Connection,
    deadline: Instant,
    bytes: &[u8],
    replies: usize,
) -> RedisResult<Vec<Value>> {
    // Sending may read too: a TLS handshake waits for the server's hello.
    let first = left(deadline)?;
    con.set_write_timeout(Some(first))?;
    con.set_read_timeout(Some(first))?;
    con.send_packed_command(bytes)?;
    let mut values = Vec::with_capacity(replies);
    while values.len() < replies {
        con.set_read_timeout(Some(left(deadline)?))?;
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
/// Over Sentinel ([`ReconnectingAsync::sentinel`]) it finds the primary as
/// [`Reconnecting::sentinel`] does. Clones share the connection.
#[derive(Clone)]
pub struct ReconnectingAsync {
    inner: AsyncTarget,
    server: Arc<str>,
    timeout: Duration,
}

#[derive(Clone)]
enum AsyncTarget {
    Fixed(ConnectionManager),
    Sentinel(Arc<Primary>),
}

/// The connection to the primary the sentinels name, shared by clones: opened on first
/// use and again after a failure; `generation` counts openings, so a request failing on
/// an old connection does not drop the one a later request opened.
struct Primary {
    sentinel: Sentinel,
    timeout: Duration,
    con: tokio::sync::Mutex<(u64, Option<MultiplexedConnection>)>,
}

impl Primary {
    /// The open connection and its generation, opening one if there is none.
    async fn get(&self) -> RedisResult<(u64, MultiplexedConnection)> {
        let mut slot = self.con.lock().await;
        if let Some(con) = &slot.1 {
            return Ok((slot.0, con.clone()));
        }
        let con = self.open().await?;
        slot.0 += 1;
        slot.1 = Some(con.clone());
        Ok((slot.0, con))
    }

    /// Drops connection `generation` if it is still the open one.
    async fn forget(&self, generation: u64) {
        let mut slot = self.con.lock().await;
        if slot.0 == generation {
            slot.1 = None;
        }
    }

    /// Asks the sentinels in turn, each within an equal share of the timeout, then
    /// connects to the primary named and checks its `ROLE`.
    async fn open(&self) -> RedisResult<MultiplexedConnection> {
        let sentinel = &self.sentinel;
        let ask = sentinel.ask();
        let share = share(self.timeout, sentinel.sentinels().len());
        let mut failures = Vec::new();
        let mut primary = None;
        for address in sentinel.sentinels() {
            let answer = tokio::time::timeout(share, async {
                let client = sentinel.client(address)?;
                let mut con = client.get_multiplexed_async_connection().await?;
                let reply = redis::aio::ConnectionLike::req_packed_command(&mut con, &ask);
                sentinel.answer(address, reply.await?)
            })
            .await
            .unwrap_or_else(|_| Err(io::Error::from(io::ErrorKind::TimedOut).into()));
            match answer {
                Ok(address) => {
                    primary = Some(address);
                    break;
                }
                Err(e) => failures.push(format!("{address}: {e}")),
            }
        }
        let address = primary.ok_or_else(|| sentinel.none_answered(&failures))?;
        let client = sentinel.client(&address)?;
        let mut con = client.get_multiplexed_async_connection().await?;
        let handshake = sentinel.handshake();
        let replies = redis::aio::ConnectionLike::req_packed_commands(
            &mut con,
            &handshake,
            0,
            handshake.len(),
        )
        .await?;
        sentinel.check_handshake(&address, replies)?;
        Ok(con)
    }
}

/// The connection one asynchronous request runs on: the manager, or the primary's.
type AsyncCon = Box<dyn redis::aio::ConnectionLike + Send>;

/// Replies that may hold a `READONLY` error (see [`read_only`]).
trait Replies {
    fn read_only(&self) -> bool;
}

impl Replies for Value {
    fn read_only(&self) -> bool {
        read_only(self)
    }
}

impl Replies for Vec<Value> {
    fn read_only(&self) -> bool {
        self.iter().any(read_only)
    }
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
    /// An asynchronous connection to the primary `sentinel` names (see
    /// [`Reconnecting::sentinel`]): no call takes longer than `timeout`, finding the
    /// primary included. Connects on first use; needs a tokio runtime with time enabled.
    pub fn sentinel(sentinel: Sentinel, timeout: Duration) -> Self {
        Self {
            server: sentinel.to_string().into(),
            inner: AsyncTarget::Sentinel(Arc::new(Primary {
                sentinel,
                timeout,
                con: tokio::sync::Mutex::new((0, None)),
            })),
            timeout,
        }
    }

    /// An asynchronous connection for `url`, any form [`Reconnecting::open`] takes.
    pub fn open(url: &str, ca_pem: Option<&[u8]>, timeout: Duration) -> Result<Self, crate::Error> {
        if !is_sentinel_url(url) {
            let client = client(url, ca_pem)?;
            return connect_async(client, timeout).map_err(crate::Error::Redis);
        }
        let sentinel = Sentinel::parse(url)?;
        let sentinel = match ca_pem {
            Some(ca_pem) => sentinel.with_ca(ca_pem),
            None => sentinel,
        };
        Ok(Self::sentinel(sentinel, timeout))
    }

    /// `request` on the connection (clones share it), given up after the timeout. Over
    /// Sentinel, a failure that leaves the connection unusable drops it, so the next
    /// request finds the primary again.
    async fn bounded<T: Replies, F: std::future::Future<Output = RedisResult<T>>>(
        &self,
        request: impl FnOnce(AsyncCon) -> F,
    ) -> RedisResult<T> {
        let attempt = async {
            match &self.inner {
                AsyncTarget::Fixed(con) => request(Box::new(con.clone())).await,
                AsyncTarget::Sentinel(primary) => {
                    let (generation, con) = primary.get().await?;
                    let result = request(Box::new(con)).await;
                    let broken = match &result {
                        Ok(replies) => replies.read_only(),
                        Err(e) => must_reconnect(e),
                    };
                    if broken {
                        primary.forget(generation).await;
                    }
                    result
                }
            }
        };
        let result = tokio::time::timeout(self.timeout, attempt)
            .await
            .unwrap_or_else(|_| Err(io::Error::from(io::ErrorKind::TimedOut).into()));
        result.map_err(|e| describe(&self.server, self.timeout, e))
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
        match &self.inner {
            AsyncTarget::Fixed(con) => con.get_db(),
            AsyncTarget::Sentinel(primary) => primary.sentinel.db(),
        }
    }
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
        inner: AsyncTarget::Fixed(ConnectionManager::new_lazy_with_config(client, config)?),
        server,
        timeout,
    })
}
