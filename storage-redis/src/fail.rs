//! What a limiter answers when Redis cannot be reached: the policy, and the outcome
//! saying who decided.

use tollgate_core::memory::KeyedLimiter;
use tollgate_core::{Algorithm, Decision};

use crate::error::Error;

/// What a limiter answers when Redis cannot be reached (see
/// [`RedisLimiter::decide`](crate::RedisLimiter::decide)).
#[derive(Debug)]
pub enum FailPolicy<A: Algorithm> {
    /// Deny: protect the service behind the limit at the cost of its callers.
    Closed,
    /// Admit: keep serving at the cost of the limit.
    Open,
    /// Decide with a limiter in this process: each replica enforces the limit alone, so
    /// a fleet of `n` admits up to `n` times the limit while Redis is away.
    Local(KeyedLimiter<Vec<u8>, A>),
}

/// A decision under a [`FailPolicy`], saying where it came from.
#[derive(Debug)]
pub enum Outcome {
    /// Redis decided.
    Redis(Decision),
    /// Redis was unreachable; the local limiter decided.
    Local(Decision, Error),
    /// Redis was unreachable; admitted by [`FailPolicy::Open`].
    Open(Error),
    /// Redis was unreachable; denied by [`FailPolicy::Closed`].
    Closed(Error),
}

impl Outcome {
    /// Whether the request may proceed.
    pub fn allowed(&self) -> bool {
        match self {
            Self::Redis(d) | Self::Local(d, _) => d.allowed,
            Self::Open(_) => true,
            Self::Closed(_) => false,
        }
    }
}

impl<A: Algorithm> FailPolicy<A> {
    /// The outcome of Redis's `result` for a request of `cost` on `key`: Redis's
    /// decision, or this policy's when Redis was unreachable; other errors (a corrupt
    /// state, bad input) are returned.
    pub(crate) fn apply(
        &self,
        key: &[u8],
        cost: u64,
        result: Result<Decision, Error>,
    ) -> Result<Outcome, Error> {
        match result {
            Ok(decision) => Ok(Outcome::Redis(decision)),
            Err(error @ Error::Unavailable(_)) => Ok(match self {
                Self::Closed => Outcome::Closed(error),
                Self::Open => Outcome::Open(error),
                Self::Local(local) => Outcome::Local(local.check(key, cost), error),
            }),
            Err(error) => Err(error),
        }
    }
}
