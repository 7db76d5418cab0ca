//! A limiter bound to a connection it owns: the core's host contract over Redis, sync
//! and async.

use std::sync::{Mutex, MutexGuard, PoisonError};

use redis::{aio, ConnectionLike};
use tollgate_core::{AsyncLimiter, Decision, Limiter, Request, Reserve, Ticks};

use crate::connection::{Reconnecting, ReconnectingAsync};
use crate::error::Error;
use crate::limiter::RedisLimiter;
use crate::lua::LuaAlgorithm;

/// A [`RedisLimiter`] with the connection its calls take, so it can implement
/// [`tollgate_core::Limiter`], whose operations take no connection. Calls through one
/// `Connected` take turns on its connection; open one per thread for parallel calls.
///
/// ```no_run
/// use tollgate_core::{Limiter, Request, TokenBucket, SECOND};
/// use tollgate_redis::{Connected, Reconnecting, RedisLimiter};
///
/// let limiter = RedisLimiter::new(TokenBucket::new(10, 5, SECOND)?)?;
/// let con = Reconnecting::new(redis::Client::open("redis://127.0.0.1/")?);
/// let host = Connected::new(limiter, con);
/// let decision = host.check(&Request::new("user:42").cost(2))?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Connected<A: LuaAlgorithm, C = Reconnecting> {
    limiter: RedisLimiter<A>,
    con: Mutex<C>,
}

impl<A: LuaAlgorithm, C: ConnectionLike> Connected<A, C> {
    /// `limiter` calling through `con`.
    pub fn new(limiter: RedisLimiter<A>, con: C) -> Self {
        Self {
            limiter,
            con: Mutex::new(con),
        }
    }

    /// The limiter, for the calls the contract does not cover (batches, purge, state).
    pub const fn limiter(&self) -> &RedisLimiter<A> {
        &self.limiter
    }

    /// The connection, for the limiter's other calls; held until the guard is dropped.
    pub fn connection(&self) -> MutexGuard<'_, C> {
        // Calls do not panic, but a poisoned lock must not turn every later call into
        // a panic either.
        self.con.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The host contract over Redis: a request with its own `now` is decided at that time
/// (beyond [`MAX_LUA_TICKS`](crate::MAX_LUA_TICKS) it is [`Error::OutOfRange`]), one
/// without at the server's `TIME`; each operation is the limiter's inherent one.
impl<A: LuaAlgorithm + Reserve, C: ConnectionLike> Limiter for Connected<A, C> {
    type Error = Error;

    fn check(&self, request: &Request<'_>) -> Result<Decision, Error> {
        self.limiter.check_request(&mut *self.connection(), request)
    }

    fn peek(&self, request: &Request<'_>) -> Result<Decision, Error> {
        self.limiter.peek(&mut *self.connection(), request)
    }

    fn reset(&self, key: &[u8]) -> Result<(), Error> {
        self.limiter.reset(&mut *self.connection(), key)
    }

    fn reserve(&self, request: &Request<'_>, max_wait: Ticks) -> Result<Decision, Error> {
        self.limiter
            .reserve_request(&mut *self.connection(), request, max_wait)
    }
}

/// A [`RedisLimiter`] with an asynchronous connection, so it can implement
/// [`tollgate_core::AsyncLimiter`]. Each call works on its own clone of the connection
/// (a [`ReconnectingAsync`] or a multiplexed connection: clones share one socket), so
/// calls from many tasks run at once.
#[derive(Debug)]
pub struct ConnectedAsync<A: LuaAlgorithm, C = ReconnectingAsync> {
    limiter: RedisLimiter<A>,
    con: C,
}

impl<A: LuaAlgorithm, C: aio::ConnectionLike + Clone> ConnectedAsync<A, C> {
    /// `limiter` calling through clones of `con`.
    pub const fn new(limiter: RedisLimiter<A>, con: C) -> Self {
        Self { limiter, con }
    }

    /// The limiter, for the calls the contract does not cover (batches, purge, state).
    pub const fn limiter(&self) -> &RedisLimiter<A> {
        &self.limiter
    }
}

/// The asynchronous host contract over Redis, with the same times as [`Connected`]'s.
impl<A, C> AsyncLimiter for ConnectedAsync<A, C>
where
    A: LuaAlgorithm + Reserve + Sync,
    A::State: Send + Sync,
    C: aio::ConnectionLike + Clone + Send + Sync,
{
    type Error = Error;

    async fn check(&self, request: &Request<'_>) -> Result<Decision, Error> {
        let mut con = self.con.clone();
        self.limiter.check_request_async(&mut con, request).await
    }

    async fn peek(&self, request: &Request<'_>) -> Result<Decision, Error> {
        let mut con = self.con.clone();
        self.limiter.peek_async(&mut con, request).await
    }

    async fn reset(&self, key: &[u8]) -> Result<(), Error> {
        let mut con = self.con.clone();
        self.limiter.reset_async(&mut con, key).await
    }

    async fn reserve(&self, request: &Request<'_>, max_wait: Ticks) -> Result<Decision, Error> {
        let mut con = self.con.clone();
        self.limiter
            .reserve_request_async(&mut con, request, max_wait)
            .await
    }
}
