//! Fleet modes: one global limit enforced by many nodes at in-process speed, trading
//! Redis calls per decision against a bounded, stated error (seed 003's three
//! optimizations of a central limiter, and the exact baseline).
//!
//! - [`FleetMode::Exact`]: every decision is one call ([`RedisLimiter::decide`]).
//! - [`FleetMode::Prefetch`]: a node takes up to a batch of units in one atomic call
//!   ([`RedisLimiter::take`]: as many as are admissible, not all-or-nothing) and spends
//!   them locally with an atomic counter. The batch is about [`FleetConfig::horizon`] of
//!   the node's own recent traffic, at most `max_batch`. Units are given back
//!   ([`RedisLimiter::refund`]) when the grant expires (after the horizon, by
//!   [`FleetLimiter::tick`]) and at [`FleetLimiter::shutdown`]; a window's units also
//!   expire with their window, and a give-back reaching the server after it is dropped.
//!   Never admits more than the global limit: its only error is units held by a node
//!   that does not need them (under-admission), at most one batch per node.
//! - [`FleetMode::Batch`]: a node decides locally against the last global state it saw
//!   and settles the units it admitted every `max_batch` decisions or every
//!   [`FleetConfig::interval`], taking them from the shared limit; over-admission is at
//!   most `max_batch` × nodes per settle interval (each node may spend what the last
//!   state showed free before it learns the others did too). A bucket is charged the
//!   units whole, into debt if need be ([`FleetAlgorithm::settle`]), so its refill pays
//!   the over-admission back and the long-run rate stays the limit's; a window forgets
//!   at its end.
//! - [`FleetMode::Split`]: each node keeps a heartbeat (a member of a sorted set scored
//!   by its expiry, TTL = 3 × interval) and enforces its share locally: `limit / n`
//!   (and `rate / n` for a token bucket), the first `limit mod n` nodes in id order
//!   taking one unit more, so the shares add up to the limit exactly. No call per
//!   decision; one per interval. Membership changes are seen at the next heartbeat: a
//!   node that dies leaves its share unused until its heartbeat expires
//!   (under-admission, at most TTL × its share), a node that joins admits its share
//!   before the others have shrunk theirs (over-admission, at most one share per
//!   interval).
//!
//! Losing Redis: a node follows the limiter's [`FailPolicy`](crate::FailPolicy) for the
//! decisions it cannot make without Redis, and asks again no sooner than one interval
//! later. No unit is spent twice: prefetched units held when Redis went away are still
//! spent until their grant expires (they were taken from the limit), a give-back that
//! fails is dropped and never retried (so units are never returned twice; at worst they
//! are lost: under-admission), a take whose reply was lost counts as nothing taken, and
//! a batch node keeps the count it has not settled and settles it when Redis returns.
//! A split node keeps enforcing its share while its membership view is younger than
//! the heartbeat's TTL, then follows the policy.
//!
//! Algorithms: the token bucket, the fixed window and the sliding counter
//! ([`FleetAlgorithm`]): their units are a stock that can be handed out and given back
//! ([`Refund`]). The leaky bucket and pacing queue (slots in time), the sliding log
//! (timestamped entries) and composites are refused by the type system.
//!
//! A fleet limiter holds one key: a fleet-wide limit is one shared budget.
//!
//! Prefetch's and batch's calls use the function library (`FCALL`) or `EVALSHA`, also
//! where the module is loaded: the module has no take or give-back command.

mod node;

use std::time::Duration;

use tollgate_core::{FixedWindow, Refund, SlidingCounter, Ticks, TokenBucket};

use crate::error::Error;
use crate::limiter::RedisLimiter;
use crate::lua::LuaAlgorithm;
use crate::reply::Taken;

pub use node::FleetLimiter;

/// How a fleet shares one limit (see the [module](self)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FleetMode {
    /// One Redis call per decision.
    Exact,
    /// Take batches of units, spend them locally; never over the limit.
    Prefetch,
    /// Decide locally, settle every `max_batch` decisions or every interval.
    Batch,
    /// Each node enforces `limit / live nodes`, counted by heartbeats.
    Split,
}

impl FleetMode {
    /// Every mode, in the order the measurements list them.
    pub const ALL: [Self; 4] = [Self::Exact, Self::Prefetch, Self::Batch, Self::Split];

    /// The mode's name in policy files and on the command line.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Exact => "exact",
            Self::Prefetch => "prefetch",
            Self::Batch => "batch",
            Self::Split => "split",
        }
    }
}

impl std::fmt::Display for FleetMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for FleetMode {
    type Err = Error;
    fn from_str(name: &str) -> Result<Self, Error> {
        Self::ALL
            .into_iter()
            .find(|m| m.name() == name)
            .ok_or_else(|| Error::FleetSetting {
                setting: "mode",
                reason: format!("unknown mode {name:?}: use exact, prefetch, batch or split"),
            })
    }
}

/// A fleet's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FleetConfig {
    /// The mode.
    pub mode: FleetMode,
    /// Prefetch: the most units one take asks for. Batch: decisions between settles.
    /// At least 1, at most the limit (a batch above it could never be granted whole, or
    /// would let one node's unsettled decisions exceed the limit by themselves).
    pub max_batch: u64,
    /// Prefetch: how long a node waits before asking again when the limit is drained.
    /// Batch: the longest time between settles. Split: the heartbeat period.
    /// `None`: 100 ms, 100 ms and 1 s.
    pub interval: Option<Duration>,
}

impl FleetConfig {
    /// `mode` with a `max_batch` of 100 and the mode's default interval.
    pub const fn new(mode: FleetMode) -> Self {
        Self {
            mode,
            max_batch: 100,
            interval: None,
        }
    }

    /// The interval in use: the configured one or the mode's default.
    pub fn interval(&self) -> Duration {
        self.interval.unwrap_or(match self.mode {
            FleetMode::Split => Duration::from_secs(1),
            _ => Duration::from_millis(100),
        })
    }

    /// Prefetch: a batch is the node's traffic over this long (two intervals), and a
    /// grant expires after it.
    pub fn horizon(&self) -> Duration {
        2 * self.interval()
    }

    /// Refuses settings that cannot work with `algorithm`, saying why.
    pub fn validate<A: FleetAlgorithm>(&self, algorithm: &A) -> Result<(), Error> {
        let limit = algorithm.limit();
        let bad = |setting, reason: String| Err(Error::FleetSetting { setting, reason });
        if self.max_batch == 0 {
            return bad("max_batch", "must be at least 1".into());
        }
        if self.max_batch > limit {
            return bad(
                "max_batch",
                format!("{} is above the limit of {limit}", self.max_batch),
            );
        }
        let interval = self.interval();
        if interval < Duration::from_millis(1) || interval > Duration::from_secs(3600) {
            return bad("interval", format!("{interval:?} is outside 1 ms..=1 h"));
        }
        Ok(())
    }
}

/// An algorithm a fleet can share: its units are a stock ([`Refund`]), it can be split
/// into shares, and it says when units taken at a time stop counting.
pub trait FleetAlgorithm:
    LuaAlgorithm<State: Send + Sync> + Refund + Clone + std::fmt::Debug + Send + Sync + 'static
{
    /// The most units it admits at once: a bucket's capacity, a window's limit.
    fn limit(&self) -> u64;

    /// When units taken at `now` stop counting: the end of `now`'s window; `None` for a
    /// bucket, whose tokens do not expire.
    fn grant_end(&self, now: Ticks) -> Option<Ticks>;

    /// The share of the node ranked `rank` (0-based, in id order) among `nodes`: each
    /// amount (limit; capacity and rate) divided by `nodes`, the first `amount mod
    /// nodes` ranks taking one more. `None` when the share is zero.
    fn share(&self, nodes: u64, rank: u64) -> Option<Self>;

    /// Batch mode's settle of `units` a node admitted on its own: taken from the shared
    /// limit as far as it has room ([`RedisLimiter::take`]; the rest is over-admission),
    /// or, for a bucket, charged whole ([`RedisLimiter::charge`]): its debt then holds
    /// every node back until the refill has paid it, so over-admission does not
    /// accumulate.
    fn settle<C: redis::ConnectionLike>(
        limiter: &RedisLimiter<Self>,
        con: &mut C,
        key: &[u8],
        units: u64,
    ) -> Result<Taken, Error> {
        limiter.take(con, key, units)
    }
}

/// `amount / nodes`, plus one for the first `amount mod nodes` ranks.
pub(crate) fn part(amount: u64, nodes: u64, rank: u64) -> u64 {
    let nodes = nodes.max(1);
    amount / nodes + u64::from(rank < amount % nodes)
}

impl FleetAlgorithm for TokenBucket {
    fn limit(&self) -> u64 {
        self.params().capacity
    }

    fn grant_end(&self, _now: Ticks) -> Option<Ticks> {
        None
    }

    fn share(&self, nodes: u64, rank: u64) -> Option<Self> {
        let p = self.params();
        Self::new(
            part(p.capacity, nodes, rank),
            part(p.rate, nodes, rank),
            p.period,
        )
        .ok()
    }

    fn settle<C: redis::ConnectionLike>(
        limiter: &RedisLimiter<Self>,
        con: &mut C,
        key: &[u8],
        units: u64,
    ) -> Result<Taken, Error> {
        limiter.charge(con, key, units)
    }
}

/// A window: a limit per period; units taken count until their window ends. `$share`
/// finishes a node's share from the whole.
macro_rules! fleet_window {
    ($window:ty, |$whole:ident, $share:ident| $finish:expr) => {
        impl FleetAlgorithm for $window {
            fn limit(&self) -> u64 {
                self.params().limit
            }

            fn grant_end(&self, now: Ticks) -> Option<Ticks> {
                let period = self.params().period;
                Some((now / period + 1).saturating_mul(period))
            }

            fn share(&self, nodes: u64, rank: u64) -> Option<Self> {
                let p = self.params();
                let ($whole, $share) =
                    (self, Self::new(part(p.limit, nodes, rank), p.period).ok()?);
                Some($finish)
            }
        }
    };
}

fleet_window!(FixedWindow, |whole, share| if whole.counts_denied() {
    share.counting_denied()
} else {
    share
});
fleet_window!(SlidingCounter, |_whole, share| share);

#[cfg(test)]
mod tests {
    use super::part;

    #[test]
    fn shares_add_up_to_the_amount() {
        for amount in [0, 1, 7, 5000, 1_000_000] {
            for nodes in 1..=17 {
                let sum: u64 = (0..nodes).map(|rank| part(amount, nodes, rank)).sum();
                assert_eq!(sum, amount, "{amount} over {nodes}");
            }
        }
    }
}
