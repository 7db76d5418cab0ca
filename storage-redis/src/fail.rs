//! What a limiter answers when Redis cannot be reached: the core's one [`FailPolicy`]
//! with a local limiter of this crate's keys, and the outcome saying who decided.

use sluicegate_core::memory::KeyedLimiter;
use sluicegate_core::Decision;

use crate::error::Error;

/// What a limiter answers when Redis cannot be reached (see
/// [`RedisLimiter::decide`](crate::RedisLimiter::decide)): the core's
/// [`FailPolicy`](sluicegate_core::FailPolicy), deciding locally on byte keys.
pub type FailPolicy<A> = sluicegate_core::FailPolicy<KeyedLimiter<Vec<u8>, A>>;

/// A decision under a [`FailPolicy`], saying where it came from.
pub type Outcome = sluicegate_core::Outcome<Error>;

/// The outcome of Redis's `result` for a request of `cost` on `key` under `policy`:
/// Redis's decision, or the policy's when Redis was unreachable; other errors (a corrupt
/// state, bad input), and an unreachable Redis under `FailPolicy::Error`, are returned.
pub(crate) fn apply<A: sluicegate_core::Algorithm>(
    policy: &FailPolicy<A>,
    key: &[u8],
    cost: u64,
    result: Result<Decision, Error>,
) -> Result<Outcome, Error> {
    policy.apply(result, Error::is_unavailable, |local| {
        local.check(key, cost)
    })
}
