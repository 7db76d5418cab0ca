//! A policy's algorithm (the core's `AnyAlgorithm`) calls the Redis scripts exactly as the
//! algorithm it holds: every method of the scripts' trait is forwarded, the defaulted ones
//! too, so a bucket policy takes the scripts' fast path exactly when its bucket would.

use proptest::prelude::*;
use sluicegate_core::{AnyAlgorithm, Request, TokenBucket};
use sluicegate_redis::LuaAlgorithm;

proptest! {
    #[test]
    fn a_policy_calls_redis_as_its_algorithm(
        limit in 1u64..1_000_000,
        rate in 1u64..1_000_000,
        period in 1u64..10_000_000_000,
        cost in 0u64..2_000_000,
        relative in 0u64..u64::MAX,
        max_wait in proptest::option::of(0u64..1_000_000),
    ) {
        let bucket = TokenBucket::new(limit, rate, period).unwrap();
        let rule = AnyAlgorithm::TokenBucket(bucket);
        prop_assert_eq!(rule.lua_keys(), bucket.lua_keys());
        prop_assert_eq!(rule.lua_cost_cap(), bucket.lua_cost_cap());
        prop_assert_eq!(
            rule.lua_fast_arg(&Request::new("").cost(cost), max_wait),
            bucket.lua_fast_arg(&Request::new("").cost(cost), max_wait)
        );
        prop_assert_eq!(
            rule.lua_fast_decision(relative, cost, max_wait),
            bucket.lua_fast_decision(relative, cost, max_wait)
        );
        // Small buckets do take the fast path, so the comparison above is not of two Nones.
        if limit < 1000 && period < 1_000_000 && cost <= limit {
            prop_assert!(rule.lua_fast_arg(&Request::new("").cost(cost), max_wait).is_some());
        }
    }
}
