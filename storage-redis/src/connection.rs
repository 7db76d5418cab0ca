//! Connections that give up within a timeout and reconnect when Redis is back.

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Client, Connection, ConnectionLike, RedisResult, Value};

/// How long a connection waits to connect or for a reply before reporting
/// [`Error::Unavailable`](crate::Error::Unavailable).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(250);

/// A synchronous connection that connects on first use, times out every connect, read
/// and write, and after a failure connects again on the next call.
pub struct Reconnecting {
    client: Client,
    timeout: Duration,
    con: Option<Connection>,
}

impl std::fmt::Debug for Reconnecting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reconnecting")
            .field("client", &self.client)
            .field("timeout", &self.timeout)
            .field("connected", &self.con.is_some())
            .finish()
    }
}

impl Reconnecting {
    /// A connection to `client`'s server with [`DEFAULT_TIMEOUT`].
    pub fn new(client: Client) -> Self {
        Self {
            client,
            timeout: DEFAULT_TIMEOUT,
            con: None,
        }
    }

    /// Sets the timeout for connecting and for each reply.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self.con = None;
        self
    }

    fn with_connection<T>(
        &mut self,
        request: impl FnOnce(&mut Connection) -> RedisResult<T>,
    ) -> RedisResult<T> {
        let con = match &mut self.con {
            Some(con) => con,
            empty => {
                let con = self.client.get_connection_with_timeout(self.timeout)?;
                con.set_read_timeout(Some(self.timeout))?;
                con.set_write_timeout(Some(self.timeout))?;
                empty.insert(con)
            }
        };
        let result = request(con);
        // After a timeout or a broken pipe the stream's position is unknown: start over.
        if let Err(e) = &result {
            if e.is_io_error() || e.is_timeout() || e.is_connection_dropped() {
                self.con = None;
            }
        }
        result
    }
}

impl ConnectionLike for Reconnecting {
    fn req_packed_command(&mut self, cmd: &[u8]) -> RedisResult<Value> {
        self.with_connection(|con| con.req_packed_command(cmd))
    }

    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        self.with_connection(|con| con.req_packed_commands(cmd, offset, count))
    }

    fn get_db(&self) -> i64 {
        self.con.as_ref().map_or(0, ConnectionLike::get_db)
    }

    fn check_connection(&mut self) -> bool {
        self.with_connection(|con| Ok(con.check_connection()))
            .unwrap_or(false)
    }

    fn is_open(&self) -> bool {
        self.con.as_ref().is_some_and(ConnectionLike::is_open)
    }
}

/// An asynchronous connection (tokio) to `client`'s server that connects lazily, gives
/// up on a connect or a reply after `timeout`, and reconnects in the background.
pub fn connect_async(client: Client, timeout: Duration) -> RedisResult<ConnectionManager> {
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout))
        .set_number_of_retries(1)
        .set_max_delay(timeout);
    ConnectionManager::new_lazy_with_config(client, config)
}
