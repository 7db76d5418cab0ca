//! The limiters the middleware runs on: in-process ([`KeyedLimiter`]) and, with the
//! `redis` feature, Redis ([`RedisBackend`]). A fleet or a remote `sluicegate serve` fits
//! the same [`Backend`] trait: a decision that may take a round trip.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use sluicegate_core::memory::{KeyHasher, KeyedLimiter};
use std::hash::BuildHasher;

use sluicegate_core::{Algorithm, Clock, Decision, MonotonicClock, Reported, Reserve, TokenBucket};

use crate::error::Error;
use crate::key::Key;

/// A future boxed to be named and sent between threads.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// What a limiter answers for a request.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verdict {
    /// A decision, by the limiter or (the store unreachable) its local fallback.
    Decided(Decision),
    /// The store is unreachable and the limiter fails open: admit, with no figures.
    Open,
    /// The store is unreachable and the limiter reports it ([`FailPolicy::Error`]) or
    /// fails closed ([`FailPolicy::Closed`]): refuse with 503, the limiter's fault rather
    /// than the client's quota (no figures exist for a 429).
    ///
    /// [`FailPolicy::Error`]: sluicegate_core::FailPolicy::Error
    /// [`FailPolicy::Closed`]: sluicegate_core::FailPolicy::Closed
    Closed,
    /// The store answered something unusable (a corrupt state): refuse (500).
    Failed(String),
}

/// What a limiter answers for a cost reported after the response (see
/// [`Backend::report`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Settled {
    /// Applied: the units recorded and dropped, and the key's standing after it.
    Reported(Reported),
    /// This limiter takes no reports (the default): nothing is charged.
    Unsupported,
    /// The store is unreachable: the report is lost.
    Unavailable,
    /// The store answered something unusable.
    Failed(String),
}

/// An answer now, or one that takes a round trip: a [`Verdict`] unless said otherwise.
pub enum Pending<T = Verdict> {
    /// Answered in process.
    Ready(T),
    /// Answered elsewhere.
    Later(BoxFuture<T>),
}

/// The limiters of another process (Redis, a remote service) answer under the core's
/// [`FailPolicy`](sluicegate_core::FailPolicy).
#[cfg(any(feature = "redis", feature = "remote"))]
impl Verdict {
    /// The verdict on such a limiter's answer: an unreachable store is refused (503)
    /// whether the policy reports it or denies; any other error is the store's failure
    /// (500).
    pub(crate) fn of<E: std::fmt::Display>(
        answer: Result<sluicegate_core::Outcome<E>, E>,
        unreachable: impl FnOnce(&E) -> bool,
    ) -> Self {
        use sluicegate_core::Outcome;
        match answer {
            Ok(Outcome::Decided(d) | Outcome::Local(d, _)) => Self::Decided(d),
            Ok(Outcome::Open(_)) => Self::Open,
            Ok(Outcome::Closed(_)) => Self::Closed,
            Err(e) if unreachable(&e) => Self::Closed,
            Err(e) => Self::Failed(e.to_string()),
        }
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for Pending<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Ready(verdict) => f.debug_tuple("Ready").field(verdict).finish(),
            Self::Later(_) => f.write_str("Later(..)"),
        }
    }
}

impl Pending {
    /// Decided in process.
    fn decided(decision: Decision) -> Self {
        Self::Ready(Verdict::Decided(decision))
    }
}

impl<T> Pending<T> {
    /// The answer.
    pub async fn resolve(self) -> T {
        match self {
            Self::Ready(verdict) => verdict,
            Self::Later(future) => future.await,
        }
    }
}

/// A keyed limit the middleware consults. One value is shared (behind an `Arc`) by every
/// clone of the layer and its services, so every connection counts against the same
/// state. Decisions never panic; a store's failure is a [`Verdict`].
pub trait Backend: Send + Sync + 'static {
    /// Decides a request of `cost` for `key` now.
    fn check(&self, key: &Key, cost: u64) -> Pending;

    /// Books a slot for `cost` within `max_wait`: admitted with the `delay` to wait, or
    /// denied. Limiters that cannot book ahead decide as [`check`](Self::check).
    fn reserve(&self, key: &Key, cost: u64, max_wait: Duration) -> Pending {
        let _ = max_wait;
        self.check(key, cost)
    }

    /// Adds `adjustment` units to what `key` has taken (negative: gives them back), a
    /// cost known after the response. Limiters whose algorithm takes no reports answer
    /// [`Settled::Unsupported`]; [`Reporting`](crate::Reporting) wraps the ones that do.
    fn report(&self, key: &Key, adjustment: i64) -> Pending<Settled> {
        let _ = (key, adjustment);
        Pending::Ready(Settled::Unsupported)
    }
}

pub(crate) use sluicegate_core::ticks;

/// The in-process limiter a [`Quota`] builds: per key, on the monotonic clock.
pub type InProcess<A = TokenBucket> = KeyedLimiter<Key, A>;

impl<A: Reserve, C: Clock, H: BuildHasher> Backend for KeyedLimiter<Key, A, C, H>
where
    Self: Send + Sync + 'static,
{
    fn check(&self, key: &Key, cost: u64) -> Pending {
        Pending::decided(KeyedLimiter::check(self, key, cost))
    }

    fn reserve(&self, key: &Key, cost: u64, max_wait: Duration) -> Pending {
        Pending::decided(KeyedLimiter::reserve(self, key, cost, ticks(max_wait)))
    }
}

/// An in-process limiter over an algorithm that cannot book ahead (fixed window, sliding
/// window, sliding log): the wait strategy decides at once.
#[derive(Debug)]
pub struct NoWait<A: Algorithm, C = MonotonicClock, H = KeyHasher>(pub KeyedLimiter<Key, A, C, H>);

impl<A: Algorithm, C: Clock, H: BuildHasher> Backend for NoWait<A, C, H>
where
    Self: Send + Sync + 'static,
{
    fn check(&self, key: &Key, cost: u64) -> Pending {
        Pending::decided(self.0.check(key, cost))
    }
}

/// A limit written as "`limit` per `period`": a token bucket holding `limit` (the burst,
/// unless set) refilled at `limit` per `period`. `Quota::per(100, 60 s)` admits 100 at
/// once and 100 a minute in the long run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quota {
    limit: u64,
    period: Duration,
    burst: Option<u64>,
}

impl Quota {
    /// `limit` requests (units of cost) per `period`.
    pub const fn per(limit: u64, period: Duration) -> Self {
        Self {
            limit,
            period,
            burst: None,
        }
    }

    /// Admits at most `burst` at once (the bucket's capacity), still `limit` per period
    /// in the long run.
    pub const fn burst(mut self, burst: u64) -> Self {
        self.burst = Some(burst);
        self
    }

    /// The number per period.
    pub const fn limit(&self) -> u64 {
        self.limit
    }

    /// The period.
    pub const fn period(&self) -> Duration {
        self.period
    }

    /// The token bucket; an error for a zero limit or period, or one beyond the core's
    /// range.
    pub fn token_bucket(&self) -> Result<TokenBucket, Error> {
        Ok(TokenBucket::new(
            self.burst.unwrap_or(self.limit),
            self.limit,
            ticks(self.period),
        )?)
    }

    /// An in-process limiter per key, holding at most `max_keys` keys.
    pub fn in_process(&self, max_keys: usize) -> Result<InProcess, Error> {
        Ok(KeyedLimiter::new(self.token_bucket()?, max_keys))
    }
}

#[cfg(feature = "redis")]
pub use self::redis_backend::RedisBackend;

#[cfg(feature = "redis")]
mod redis_backend {
    use std::sync::Arc;
    use std::time::Duration;

    use sluicegate_core::{Request, Reserve};
    use sluicegate_redis::{LuaAlgorithm, Outcome, ReconnectingAsync, RedisLimiter};

    use super::{ticks, Backend, Pending, Verdict};
    use crate::key::Key;

    /// A limit in Redis, shared by every replica using the same prefix, through an
    /// asynchronous connection; when Redis is unreachable, the limiter's
    /// [`FailPolicy`](sluicegate_redis::FailPolicy) answers.
    #[derive(Debug)]
    pub struct RedisBackend<A: LuaAlgorithm> {
        pub(crate) limiter: Arc<RedisLimiter<A>>,
        pub(crate) con: ReconnectingAsync,
    }

    impl<A: LuaAlgorithm> RedisBackend<A> {
        /// Decides with `limiter` over `con` (clones share its connection).
        pub fn new(limiter: RedisLimiter<A>, con: ReconnectingAsync) -> Self {
            Self {
                limiter: Arc::new(limiter),
                con,
            }
        }
    }

    fn verdict(outcome: Result<Outcome, sluicegate_redis::Error>) -> Verdict {
        Verdict::of(outcome, sluicegate_redis::Error::is_unavailable)
    }

    impl<A> Backend for RedisBackend<A>
    where
        A: LuaAlgorithm + Reserve + Send + Sync + 'static,
        A::State: Send + Sync,
    {
        fn check(&self, key: &Key, cost: u64) -> Pending {
            let (limiter, mut con, key) = (self.limiter.clone(), self.con.clone(), key.to_bytes());
            Pending::Later(Box::pin(async move {
                verdict(limiter.decide_async(&mut con, &key, cost).await)
            }))
        }

        /// Books the slot in Redis. When Redis is unreachable the request is decided as
        /// a plain check under the fail policy (no local booking).
        fn reserve(&self, key: &Key, cost: u64, max_wait: Duration) -> Pending {
            let (limiter, mut con, key) = (self.limiter.clone(), self.con.clone(), key.to_bytes());
            Pending::Later(Box::pin(async move {
                match limiter
                    .reserve_async(&mut con, &Request::new(&key).cost(cost), ticks(max_wait))
                    .await
                {
                    Ok(d) => Verdict::Decided(d),
                    Err(e) if e.is_unavailable() => {
                        verdict(limiter.decide_async(&mut con, &key, cost).await)
                    }
                    Err(e) => Verdict::Failed(e.to_string()),
                }
            }))
        }
    }
}
