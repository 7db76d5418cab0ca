use crate::common::*;
use proptest::prelude::*;
use sluicegate_core::{Algorithm, Ban, FixedWindow, Ticks, TokenBucket, SECOND};

/// The definition: the inner limiter decides unless the key is banned; once the cost
/// denied within one aligned ban window exceeds the threshold, every request is denied
/// until `duration` after the denial that crossed it, and changes nothing meanwhile.
fn reference(
    limit: u64,
    period: Ticks,
    threshold: u64,
    window: Ticks,
    duration: Ticks,
    arrivals: &[(Ticks, u64)],
) -> Vec<bool> {
    let mut admitted: Vec<(Ticks, u64)> = Vec::new();
    let mut denied: Vec<(Ticks, u64)> = Vec::new();
    let mut banned_until = 0;
    arrivals
        .iter()
        .map(|&(now, cost)| {
            if now < banned_until {
                return false;
            }
            let used: u128 = admitted
                .iter()
                .filter(|a| a.0 / period == now / period)
                .map(|a| u128::from(a.1))
                .sum();
            if used + u128::from(cost) <= u128::from(limit) {
                admitted.push((now, cost));
                return true;
            }
            denied.push((now, cost));
            let in_window: u128 = denied
                .iter()
                .filter(|d| d.0 / window == now / window)
                .map(|d| u128::from(d.1))
                .sum();
            if in_window > u128::from(threshold) {
                banned_until = now + duration;
            }
            false
        })
        .collect()
}

proptest! {
    #[test]
    fn matches_definition(limit in 1..10u64, period in 1..1000u64, threshold in 0..10u64, window in 1..3000u64, duration in 1..5000u64, raw in raw_arrivals()) {
        let alg = Ban::new(FixedWindow::new(limit, period).unwrap(), threshold, window, duration).unwrap();
        let arrivals = arrivals(&raw, period, limit);
        let decisions = run(&alg, 10 * (period + duration), &arrivals);
        let got: Vec<_> = decisions.iter().map(|d| d.allowed).collect();
        prop_assert_eq!(got, reference(limit, period, threshold, window, duration, &arrivals));
    }

    /// Costs up to `u64::MAX`: the denied cost the state keeps saturates at
    /// `threshold + 1`, and the decisions are still the definition's.
    #[test]
    fn huge_costs_saturate_without_changing_decisions(limit in 1..10u64, period in 1..1000u64, threshold in prop_oneof![0..10u64, Just(u64::MAX - 1)], window in 1..3000u64, duration in 1..5000u64, raw in raw_arrivals(), huge in prop::collection::vec(prop_oneof![Just(u64::MAX), 1u64 << 52.., Just(0)], 120)) {
        let alg = Ban::new(FixedWindow::new(limit, period).unwrap(), threshold, window, duration).unwrap();
        let arrivals: Vec<_> = arrivals(&raw, period, limit)
            .into_iter()
            .zip(&huge)
            .map(|((now, cost), &h)| (now, if h > 0 && cost > limit { h } else { cost }))
            .collect();
        let mut state = None;
        let mut got = Vec::new();
        for &(now, cost) in &arrivals {
            let (d, next) = alg.decide(state, now, cost);
            if let Some(s) = &next {
                let bytes = alg.encode_to_vec(s);
                let denied = u64::from_be_bytes(bytes[10..18].try_into().unwrap());
                prop_assert!(denied <= threshold.saturating_add(1));
                prop_assert_eq!(&alg.decode(&bytes).unwrap(), s);
            }
            got.push(d.allowed);
            state = next;
        }
        prop_assert_eq!(got, reference(limit, period, threshold, window, duration, &arrivals));
    }

    #[test]
    fn promises_hold_around_a_bucket(capacity in 1..10u64, rate in 1..10u64, period in 1..1000u64, threshold in 0..10u64, window in 1..3000u64, duration in 1..5000u64, raw in raw_arrivals()) {
        let alg = Ban::new(TokenBucket::new(capacity, rate, period).unwrap(), threshold, window, duration).unwrap();
        run(&alg, 10 * (period + duration), &arrivals(&raw, period, capacity));
    }
}

/// A client far over its limit is shut out for a while.
#[test]
fn ban_after_hammering() {
    let alg = Ban::new(
        FixedWindow::new(5, SECOND).unwrap(),
        10,
        60 * SECOND,
        600 * SECOND,
    )
    .unwrap();
    let mut state = None;
    let mut admitted = 0;
    for i in 0..20 {
        let (d, s) = alg.decide(state, i, 1);
        admitted += u64::from(d.allowed);
        state = s;
    }
    assert_eq!(admitted, 5);
    // 15 denied > 10: banned for ten minutes from the 16th request (at tick 15).
    let (d, _) = alg.decide(state.clone(), 5 * SECOND, 1);
    assert!(!d.allowed);
    assert_eq!(d.retry_after, Some(600 * SECOND + 15 - 5 * SECOND));
    assert!(alg.decide(state, 600 * SECOND + 15, 1).0.allowed);
}

/// Denied cost is stored up to `threshold + 1`, and a state holding more is refused.
#[test]
fn denied_cost_saturates_one_past_the_threshold() {
    let alg = Ban::new(FixedWindow::new(1, SECOND).unwrap(), 5, SECOND, SECOND).unwrap();
    let (d, state) = alg.decide(None, 0, 1 << 52);
    assert!(!d.allowed);
    let mut bytes = alg.encode_to_vec(&state.unwrap());
    assert_eq!(bytes[10..18], 6u64.to_be_bytes());
    assert!(alg.decode(&bytes).is_ok());
    bytes[10..18].copy_from_slice(&7u64.to_be_bytes());
    assert_eq!(
        alg.decode(&bytes),
        Err(sluicegate_core::DecodeError::InvalidField { field: "denied" })
    );
}

/// `threshold + 1` must be representable: a threshold of `u64::MAX` is refused.
#[test]
fn the_largest_threshold_is_one_below_u64_max() {
    let inner = FixedWindow::new(1, SECOND).unwrap();
    assert!(Ban::new(inner, u64::MAX - 1, SECOND, SECOND).is_ok());
    assert!(Ban::new(inner, u64::MAX, SECOND, SECOND).is_err());
}
