use crate::common::*;
use proptest::prelude::*;
use sluicegate_core::limits::MAX_LIMIT;
use sluicegate_core::{Algorithm, SlidingCounter, Ticks, SECOND};

/// The definition, by brute force over every admitted request: with `prev` and `cur`
/// the cost admitted in the previous and current aligned windows and `e` the time into
/// the current one, admit iff `prev · (period − e) / period + cur + cost <= limit`.
/// `remaining` is the largest cost that would still pass.
fn reference(limit: u64, period: Ticks, arrivals: &[(Ticks, u64)]) -> Vec<(bool, u64)> {
    let mut admitted: Vec<(Ticks, u64)> = Vec::new();
    arrivals
        .iter()
        .map(|&(now, cost)| {
            let window = now / period;
            let sum = |w: u64| cost_where(&admitted, |t| t / period == w);
            let prev = if window > 0 { sum(window - 1) } else { 0 };
            let cur = sum(window);
            let weight = u128::from(period - now % period);
            let passes = |c: u64| {
                u128::from(prev) * weight + u128::from(cur + c) * u128::from(period)
                    <= u128::from(limit) * u128::from(period)
            };
            let allowed = passes(cost);
            if allowed {
                admitted.push((now, cost));
            }
            let base = if allowed { cost } else { 0 };
            let remaining = (0..=limit)
                .rev()
                .find(|&r| r <= limit - cur - base && passes(base + r))
                .unwrap_or(0);
            (allowed, remaining)
        })
        .collect()
}

proptest! {
    #[test]
    fn matches_definition(limit in prop_oneof![1..=4u64, 1..=100u64], period in period(), raw in raw_arrivals()) {
        let arrivals = arrivals(&raw, period, limit);
        let alg = SlidingCounter::new(limit, period).unwrap();
        prop_assert_eq!(decided(&alg, period, &arrivals), reference(limit, period, &arrivals));
    }

    /// The same in the last periods before `MAX_TICKS`, windows still aligned to tick 0.
    #[test]
    fn matches_definition_at_the_top(limit in prop_oneof![1..=4u64, 1..=100u64], period in period(), raw in raw_arrivals(), end in top_end()) {
        let arrivals = at_the_top(&arrivals(&raw, period, limit), 1, period, end);
        let alg = SlidingCounter::new(limit, period).unwrap();
        prop_assert_eq!(decided(&alg, period, &arrivals), reference(limit, period, &arrivals));
    }

    #[test]
    fn promises_hold_across_the_range(limit in limit(MAX_LIMIT), period in period(), raw in raw_arrivals()) {
        let alg = SlidingCounter::new(limit, period).unwrap();
        run(&alg, 10 * period, &arrivals(&raw, period, limit));
    }

    /// The documented error bound: at most `limit` per aligned window, and under
    /// `2 × limit` in any sliding window of one period.
    #[test]
    fn error_bound(limit in 1..50u64, period in 1..1000u64, raw in raw_arrivals()) {
        let admitted = admitted_by(&SlidingCounter::new(limit, period).unwrap(), period, limit, &raw);
        for &(end, _) in &admitted {
            prop_assert!(cost_where(&admitted, |t| t / period == end / period) <= limit);
            prop_assert!(cost_where(&admitted, |t| t <= end && t + period > end) < 2 * limit);
        }
    }
}

#[test]
fn weighs_the_previous_window() {
    let alg = SlidingCounter::new(10, SECOND).unwrap();
    let (d, state) = alg.decide(None, 0, 10);
    assert!(d.allowed);
    assert_eq!(d.reset_after, 2 * SECOND);
    // A quarter into the next window, the previous 10 count as 7.5: 2 more fit, not 3.
    let quarter = SECOND + SECOND / 4;
    assert!(alg.peek(state, quarter, 2).allowed);
    let d = alg.peek(state, quarter, 3);
    assert!(!d.allowed);
    // 3 fit once the previous window weighs 7: 30% into the window.
    assert_eq!(d.retry_after, Some(SECOND * 3 / 10 - SECOND / 4));
    assert_eq!(d.remaining, 2);
}
