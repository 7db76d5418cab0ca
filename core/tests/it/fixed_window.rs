use crate::common::*;
use proptest::prelude::*;
use sluicegate_core::limits::MAX_LIMIT;
use sluicegate_core::{Algorithm, FixedWindow, ParamError, Ticks, SECOND};

/// The definition, by brute force over every admitted request: the cost admitted in
/// `now`'s aligned window plus `cost` must be at most `limit`.
fn aligned(period: Ticks) -> impl Fn(Ticks, Ticks) -> bool {
    move |now, t| t / period == now / period
}

window_properties!(FixedWindow, MAX_LIMIT, aligned);

proptest! {
    /// Costs up to `u64::MAX`, counting denied cost: the stored count saturates at the
    /// limit and every decision is the one an unbounded count gives (a cost of zero is
    /// always admitted).
    #[test]
    fn counted_cost_saturates_at_the_limit(limit in limit(MAX_LIMIT), period in period(), raw in raw_arrivals(), huge in prop::collection::vec(prop_oneof![Just(u64::MAX), 1u64 << 52.., Just(0)], 120)) {
        let alg = FixedWindow::new(limit, period).unwrap().counting_denied();
        let arrivals: Vec<_> = arrivals(&raw, period, limit)
            .into_iter()
            .zip(&huge)
            .map(|((now, cost), &h)| (now, if h > 0 && cost > limit { h } else { cost }))
            .collect();
        let (mut state, mut window, mut count) = (None, u64::MAX, 0u128);
        for &(now, cost) in &arrivals {
            let (d, next) = alg.decide(state, now, cost);
            if now / period != window {
                (window, count) = (now / period, 0);
            }
            let allowed = cost == 0 || count + u128::from(cost) <= u128::from(limit);
            count += u128::from(cost);
            let end = (window + 1) * period - now;
            prop_assert_eq!(d.allowed, allowed);
            prop_assert_eq!(u128::from(d.remaining), u128::from(limit).saturating_sub(count));
            prop_assert_eq!(d.reset_after, if count > 0 { end } else { 0 });
            prop_assert_eq!(d.retry_after, if allowed { Some(0) } else { (cost <= limit).then_some(end) });
            if let Some(s) = &next {
                let bytes = alg.encode_to_vec(s);
                prop_assert!(u64::from_be_bytes(bytes[10..18].try_into().unwrap()) <= limit);
                prop_assert_eq!(&alg.decode(&bytes).unwrap(), s);
            }
            state = next;
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
    // The boundary burst fixed windows are known for: the next window starts afresh.
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
    assert!(FixedWindow::new(MAX_LIMIT, sluicegate_core::limits::MAX_PERIOD).is_ok());
}

/// Issue 16, item 3: a cost of 2^52 counted as denied stores the limit, not the cost,
/// and a count above the limit is refused in both modes (no host can have written it).
#[test]
fn a_huge_denied_cost_stores_the_limit() {
    let alg = FixedWindow::new(10, SECOND).unwrap().counting_denied();
    let (d, state) = alg.decide(None, 0, 1 << 52);
    assert!(!d.allowed);
    assert_eq!(d.retry_after, None);
    let bytes = alg.encode_to_vec(&state.unwrap());
    assert_eq!(bytes[10..18], 10u64.to_be_bytes());
    let (d, _) = alg.decide(state, 1, 1);
    assert!(!d.allowed);
    assert_eq!((d.remaining, d.retry_after), (0, Some(SECOND - 1)));
    let invalid = Err(sluicegate_core::DecodeError::InvalidField { field: "count" });
    let mut over = bytes;
    over[10..18].copy_from_slice(&11u64.to_be_bytes());
    assert_eq!(alg.decode(&over), invalid);
    assert_eq!(FixedWindow::new(10, SECOND).unwrap().decode(&over), invalid);
}
