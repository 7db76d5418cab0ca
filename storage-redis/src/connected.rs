//! A host bound to a connection it owns: the core's host contracts over Redis, sync and
//! async, for limits ([`RedisLimiter`]) and leases ([`RedisLeases`]) alike.

use std::sync::{Mutex, MutexGuard, PoisonError};

use redis::{aio, ConnectionLike};
use sluicegate_core::{
    Acquired, AsyncLeaseHost, AsyncLimiter, AsyncReporter, Decision, Grant, LeaseHost,
    LeaseRequest, LeaseState, Limiter, Report, ReportRequest, Reported, Reporter, Request, Reserve,
    Ticks,
};

use crate::connection::{Reconnecting, ReconnectingAsync};
use crate::error::Error;
use crate::lease::RedisLeases;
use crate::limiter::RedisLimiter;
use crate::lua::LuaAlgorithm;

/// A [`RedisLimiter`] or [`RedisLeases`] with the connection its calls take, so it can
/// implement [`sluicegate_core::Limiter`] or [`sluicegate_core::LeaseHost`], whose operations
/// take no connection. Calls through one `Connected` take turns on its connection; open
/// one per thread for parallel calls.
///
/// ```no_run
/// use sluicegate_core::{Concurrency, LeaseHost, LeaseRequest, Limiter, Request, TokenBucket, SECOND};
/// use sluicegate_redis::{Connected, Reconnecting, RedisLeases, RedisLimiter};
///
/// let client = redis::Client::open("redis://127.0.0.1/")?;
/// let limiter = RedisLimiter::new(TokenBucket::new(10, 5, SECOND)?)?;
/// let host = Connected::new(limiter, Reconnecting::new(client.clone()));
/// let decision = host.check(&Request::new("user:42").cost(2))?;
/// let locks = Connected::new(RedisLeases::new(Concurrency::lock()), Reconnecting::new(client));
/// let lease = locks.acquire(&LeaseRequest::new("export").owner("node-a").ttl(30 * SECOND))?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Connected<H, C = Reconnecting> {
    host: H,
    con: Mutex<C>,
}

impl<H, C: ConnectionLike> Connected<H, C> {
    /// `host` calling through `con`.
    pub fn new(host: H, con: C) -> Self {
        Self {
            host,
            con: Mutex::new(con),
        }
    }

    /// The limiter or leases, for the calls the contract does not cover (batches, purge,
    /// state).
    pub const fn host(&self) -> &H {
        &self.host
    }

    /// The connection, for the host's other calls; held until the guard is dropped.
    pub fn connection(&self) -> MutexGuard<'_, C> {
        // Calls do not panic, but a poisoned lock must not turn every later call into
        // a panic either.
        self.con.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The host contract over Redis: a request with its own `now` is decided at that time
/// (beyond the core's `MAX_TICKS`, or a sliding log's
/// [`MAX_LUA_TICKS`](crate::MAX_LUA_TICKS), it is [`Error::OutOfRange`]), one without
/// at the server's `TIME`; each operation is the limiter's inherent one.
impl<A: LuaAlgorithm + Reserve, C: ConnectionLike> Limiter for Connected<RedisLimiter<A>, C> {
    type Error = Error;

    fn check(&self, request: &Request<'_>) -> Result<Decision, Error> {
        self.host.check_request(&mut *self.connection(), request)
    }

    fn peek(&self, request: &Request<'_>) -> Result<Decision, Error> {
        self.host.peek(&mut *self.connection(), request)
    }

    fn reset(&self, key: &[u8]) -> Result<(), Error> {
        self.host.reset(&mut *self.connection(), key)
    }

    fn reserve(&self, request: &Request<'_>, max_wait: Ticks) -> Result<Decision, Error> {
        self.host
            .reserve(&mut *self.connection(), request, max_wait)
    }
}

/// Reports over Redis, with the same times as the limiter's decisions.
impl<A: LuaAlgorithm + Report, C: ConnectionLike> Reporter for Connected<RedisLimiter<A>, C> {
    type Error = Error;

    fn report(&self, request: &ReportRequest<'_>) -> Result<Reported, Error> {
        self.host.report(&mut *self.connection(), request)
    }
}

/// The lease contract over Redis, with the same times as the limiter's.
impl<C: ConnectionLike> LeaseHost for Connected<RedisLeases, C> {
    type Error = Error;

    fn acquire(&self, request: &LeaseRequest<'_>) -> Result<Acquired, Error> {
        self.host.acquire(&mut *self.connection(), request)
    }

    fn release(&self, request: &LeaseRequest<'_>) -> Result<Grant, Error> {
        self.host.release(&mut *self.connection(), request)
    }

    fn renew(&self, request: &LeaseRequest<'_>) -> Result<Grant, Error> {
        self.host.renew(&mut *self.connection(), request)
    }

    fn state(&self, key: &[u8]) -> Result<Option<LeaseState>, Error> {
        self.host.state(&mut *self.connection(), key)
    }
}

/// A [`RedisLimiter`] or [`RedisLeases`] with an asynchronous connection, so it can
/// implement [`sluicegate_core::AsyncLimiter`] or [`sluicegate_core::AsyncLeaseHost`]. Each
/// call works on its own clone of the connection (a [`ReconnectingAsync`] or a
/// multiplexed connection: clones share one socket), so calls from many tasks run at
/// once.
#[derive(Debug)]
pub struct ConnectedAsync<H, C = ReconnectingAsync> {
    host: H,
    con: C,
}

impl<H, C: aio::ConnectionLike + Clone> ConnectedAsync<H, C> {
    /// `host` calling through clones of `con`.
    pub const fn new(host: H, con: C) -> Self {
        Self { host, con }
    }

    /// The limiter or leases, for the calls the contract does not cover (batches, purge,
    /// state).
    pub const fn host(&self) -> &H {
        &self.host
    }

    /// The connection a call works on: a clone of the one given.
    fn con(&self) -> C {
        self.con.clone()
    }
}

/// The asynchronous host contract over Redis, with the same times as [`Connected`]'s.
impl<A, C> AsyncLimiter for ConnectedAsync<RedisLimiter<A>, C>
where
    A: LuaAlgorithm + Reserve + Sync,
    A::State: Send + Sync,
    C: aio::ConnectionLike + Clone + Send + Sync,
{
    type Error = Error;

    async fn check(&self, request: &Request<'_>) -> Result<Decision, Error> {
        self.host
            .check_request_async(&mut self.con(), request)
            .await
    }

    async fn peek(&self, request: &Request<'_>) -> Result<Decision, Error> {
        self.host.peek_async(&mut self.con(), request).await
    }

    async fn reset(&self, key: &[u8]) -> Result<(), Error> {
        self.host.reset_async(&mut self.con(), key).await
    }

    async fn reserve(&self, request: &Request<'_>, max_wait: Ticks) -> Result<Decision, Error> {
        self.host
            .reserve_async(&mut self.con(), request, max_wait)
            .await
    }
}

/// Asynchronous reports over Redis, with the same times as [`Connected`]'s.
impl<A: LuaAlgorithm + Report + Sync, C: aio::ConnectionLike + Clone + Send + Sync> AsyncReporter
    for ConnectedAsync<RedisLimiter<A>, C>
where
    A::State: Send + Sync,
{
    type Error = Error;

    async fn report(&self, request: &ReportRequest<'_>) -> Result<Reported, Error> {
        self.host.report_async(&mut self.con(), request).await
    }
}

/// The asynchronous lease contract over Redis.
impl<C: aio::ConnectionLike + Clone + Send + Sync> AsyncLeaseHost
    for ConnectedAsync<RedisLeases, C>
{
    type Error = Error;

    async fn acquire(&self, request: &LeaseRequest<'_>) -> Result<Acquired, Error> {
        self.host.acquire_async(&mut self.con(), request).await
    }

    async fn release(&self, request: &LeaseRequest<'_>) -> Result<Grant, Error> {
        self.host.release_async(&mut self.con(), request).await
    }

    async fn renew(&self, request: &LeaseRequest<'_>) -> Result<Grant, Error> {
        self.host.renew_async(&mut self.con(), request).await
    }

    async fn state(&self, key: &[u8]) -> Result<Option<LeaseState>, Error> {
        self.host.state_async(&mut self.con(), key).await
    }
}
