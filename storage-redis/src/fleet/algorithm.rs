//! What an algorithm needs to be shared by a fleet, and the algorithms that can be.

use sluicegate_core::{FixedWindow, Refund, SlidingCounter, Ticks, TokenBucket};

use crate::lua::LuaAlgorithm;

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

    /// How batch mode settles the units a node admitted on its own: taken from the
    /// shared limit as far as it has room ([`take`](crate::RedisLimiter::take); the rest
    /// is over-admission), or, `true` for a bucket, charged whole
    /// ([`charge`](crate::RedisLimiter::charge)): its debt then holds every node back
    /// until the refill has paid it, so over-admission does not accumulate.
    const CHARGED: bool = false;
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

    const CHARGED: bool = true;
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
