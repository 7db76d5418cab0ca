mod common;

use common::*;
use proptest::prelude::*;
use tollgate_core::limits::MAX_LIMIT;
use tollgate_core::{Algorithm, FixedWindow, ParamError, Ticks, SECOND};

/// The definition, by brute force over every admitted request: the cost admitted in
/// `now`'s aligned window plus `cost` must be at most `limit`.
fn reference(limit: u64, period: Ticks, arrivals: &[(Ticks, u64)]) -> Vec<(bool, u64)> {
    window_reference(limit, arrivals, |now, t| t / period == now / period)
}

proptest! {
    #[test]
    fn matches_definition(limit in limit(MAX_LIMIT), period in period(), raw in raw_arrivals()) {
        let alg = FixedWindow::new(limit, period).unwrap();
        let arrivals = arrivals(&raw, period, limit);
        let decisions = run(&alg, 10 * period, &arrivals);
        prop_assert_eq!(outcomes(&decisions), reference(limit, period, &arrivals));
    }

    #[test]
    fn never_more_than_limit_in_an_aligned_window(limit in 1..50u64, period in 1..1000u64, raw in raw_arrivals()) {
        let alg = FixedWindow::new(limit, period).unwrap();
        let arrivals = arrivals(&raw, period, limit);
        let admitted = admitted(&arrivals, &run(&alg, 10 * period, &arrivals));
        for &(t, _) in &admitted {
            let total: u64 = admitted.iter().filter(|a| a.0 / period == t / period).map(|a| a.1).sum();
            prop_assert!(total <= limit);
        }
    }

    #[test]
    fn counting_denied_blocks_until_the_window_ends(limit in 1..20u64, period in 1..1000u64, raw in raw_arrivals()) {
        let alg = FixedWindow::new(limit, period).unwrap().counting_denied();
        let arrivals = arrivals(&raw, period, limit);
        let decisions = run(&alg, 10 * period, &arrivals);
        // Every request, admitted or not, counts: so within a window, once one is denied
        // no later one with positive cost is admitted.
        for (i, (&(t, _), d)) in arrivals.iter().zip(&decisions).enumerate() {
            if !d.allowed {
                for (&(u, c), e) in arrivals.iter().zip(&decisions).skip(i + 1) {
                    prop_assert!(u / period != t / period || c == 0 || !e.allowed);
                }
            }
        }
    }
}

#[test]
fn counts_per_aligned_window() {
    let alg = FixedWindow::new(3, SECOND).unwrap();
    let mut state = None;
    for i in 0..3 {
        let (d, s) = alg.decide(state, 500_000 + i, 1);
        assert!(d.allowed);
        assert_eq!(d.remaining, 2 - i);
        assert_eq!(d.reset_after, 500_000 - i);
        state = s;
    }
    let (d, _) = alg.decide(state, 999_999, 1);
    assert!(!d.allowed);
    assert_eq!(d.retry_after, Some(1));
    // The boundary burst the seeds warn about: the next window starts afresh.
    let (d, _) = alg.decide(state, SECOND, 3);
    assert!(d.allowed);
}

#[test]
fn never_for_cost_above_limit_and_time_going_backwards() {
    let alg = FixedWindow::new(3, SECOND).unwrap();
    let (d, state) = alg.decide(None, 5 * SECOND, 3);
    assert!(d.allowed);
    let (d, _) = alg.decide(None, 0, 4);
    assert_eq!(d.retry_after, None);
    // An earlier `now` is decided in the stored window, not a fresh earlier one.
    let (d, _) = alg.decide(state, 4 * SECOND, 1);
    assert!(!d.allowed);
    assert_eq!(d.retry_after, Some(SECOND));
}

#[test]
fn invalid_parameters_are_errors() {
    assert!(matches!(
        FixedWindow::new(0, SECOND),
        Err(ParamError::OutOfRange { name: "limit", .. })
    ));
    assert!(matches!(
        FixedWindow::new(1, 0),
        Err(ParamError::OutOfRange { name: "period", .. })
    ));
    assert!(FixedWindow::new(MAX_LIMIT + 1, SECOND).is_err());
    assert!(FixedWindow::new(MAX_LIMIT, tollgate_core::limits::MAX_PERIOD).is_ok());
}
