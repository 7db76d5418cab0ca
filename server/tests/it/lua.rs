//! A policy's algorithm (the core's `AnyAlgorithm`) calls the Redis scripts exactly as the
//! algorithm it holds: every method of the scripts' trait is forwarded, the defaulted ones
//! too, so a bucket policy takes the scripts' fast path exactly when its bucket would.

use proptest::option;
use proptest::prelude::*;
use sluicegate_core::{AnyAlgorithm, TokenBucket};
use sluicegate_redis::{FastAsk, LuaAlgorithm};

/// Buckets from the smallest to beyond the fast path's bound.
fn buckets() -> impl Strategy<Value = TokenBucket> {
    (1u64..1_000_000, 1u64..1_000_000, 1u64..10_000_000_000)
        .prop_map(|(limit, rate, period)| TokenBucket::new(limit, rate, period).unwrap())
}

/// Checks and reservations, at the server's time or an explicit one up to beyond the fast
/// path's bound.
fn asks() -> impl Strategy<Value = FastAsk> {
    let times = option::of(0u64..1 << 53);
    (0u64..2_000_000, times, option::of(0u64..1_000_000)).prop_map(|(cost, now, max_wait)| {
        FastAsk {
            cost,
            now,
            max_wait,
        }
    })
}

proptest! {
    #[test]
    fn a_policy_calls_redis_as_its_algorithm(
        bucket in buckets(),
        ask in asks(),
        relative in 0u64..u64::MAX,
    ) {
        let rule = AnyAlgorithm::TokenBucket(bucket);
        prop_assert_eq!(rule.lua_keys(), bucket.lua_keys());
        prop_assert_eq!(rule.lua_cost_cap(), bucket.lua_cost_cap());
        prop_assert_eq!(rule.lua_fast_arg(ask), bucket.lua_fast_arg(ask));
        prop_assert_eq!(
            rule.lua_fast_decision(relative, ask),
            bucket.lua_fast_decision(relative, ask)
        );
        // Small buckets do take the fast path, so the comparison above is not of two Nones.
        let params = bucket.params();
        let early = ask.now.is_none_or(|now| now <= 1 << 52);
        if params.capacity < 1000 && params.period < 1_000_000 && ask.cost <= params.capacity && early {
            prop_assert!(rule.lua_fast_arg(ask).is_some());
        }
    }
}
