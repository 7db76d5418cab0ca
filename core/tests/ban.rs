mod common;

use common::*;
use proptest::prelude::*;
use tollgate_core::{Algorithm, Ban, FixedWindow, Ticks, TokenBucket, SECOND};

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
            let used: u64 = admitted
                .iter()
                .filter(|a| a.0 / period == now / period)
                .map(|a| a.1)
                .sum();
            if used + cost <= limit {
                admitted.push((now, cost));
                return true;
            }
            denied.push((now, cost));
            let in_window: u64 = denied
                .iter()
                .filter(|d| d.0 / window == now / window)
                .map(|d| d.1)
                .sum();
            if in_window > threshold {
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

    #[test]
    fn promises_hold_around_a_bucket(capacity in 1..10u64, rate in 1..10u64, period in 1..1000u64, threshold in 0..10u64, window in 1..3000u64, duration in 1..5000u64, raw in raw_arrivals()) {
        let alg = Ban::new(TokenBucket::new(capacity, rate, period).unwrap(), threshold, window, duration).unwrap();
        run(&alg, 10 * (period + duration), &arrivals(&raw, period, capacity));
    }
}

/// Seed 001: a client far over its limit is shut out for a while.
#[test]
fn seed_ban_after_hammering() {
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
