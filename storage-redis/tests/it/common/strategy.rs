//! Parts of the random traces the property tests share.

use proptest::prelude::*;
use sluicegate_core::Ticks;
use sluicegate_redis::MAX_LUA_LIMIT;

/// A limit: small, middling, up to the largest the scripts take (the core's), or within
/// a thousand of it, where the scripts compute in limbs.
pub fn limit() -> impl Strategy<Value = u64> {
    prop_oneof![
        1..=4u64,
        1..=100u64,
        1..=MAX_LUA_LIMIT,
        MAX_LUA_LIMIT - 1000..=MAX_LUA_LIMIT
    ]
}

/// The gap before a request: none, a few ticks, or up to three periods.
pub fn gap(period: Ticks) -> impl Strategy<Value = Ticks> {
    prop_oneof![Just(0), 0..4u64, 0..=period / 8, 0..=period, 0..=3 * period]
}

/// A cost around `limit` (at least 1): none, one, up to a quarter of it, up to just past
/// it, at it, or the most a caller can ask.
pub fn cost(limit: u64) -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0),
        Just(1),
        0..=limit / 4 + 1,
        0..=limit + 2,
        limit.saturating_sub(1)..=limit + 1,
        Just(u64::MAX)
    ]
}

/// A report's adjustment around `limit`: a cost's size either way, or the extremes.
pub fn adjustment(limit: u64) -> impl Strategy<Value = i64> {
    let units = || cost(limit).prop_map(|c| i64::try_from(c).unwrap_or(i64::MAX));
    prop_oneof![
        4 => units(),
        3 => units().prop_map(|u| -u),
        1 => Just(i64::MIN),
    ]
}

/// An overdraft: none, a few units, up to the limit, or the most the core takes.
pub fn overdraft(limit: u64) -> impl Strategy<Value = u64> {
    prop_oneof![Just(0), 1..=4u64, 0..=limit, Just(MAX_LUA_LIMIT)]
}
