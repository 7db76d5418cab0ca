use crate::common::*;
use proptest::prelude::*;
use sluicegate_core::limits::MAX_LOG_LIMIT;
use sluicegate_core::{Algorithm, SlidingLog, Ticks, SECOND};

/// The definition, by brute force: the cost admitted at instants `t > now − period`,
/// plus `cost`, must be at most `limit`. (Any window of length `period` with the most
/// admitted cost ends at an admission, so checking those bounds them all.)
fn sliding(period: Ticks) -> impl Fn(Ticks, Ticks) -> bool {
    move |now, t| t + period > now
}

window_properties!(SlidingLog, MAX_LOG_LIMIT, sliding);

#[test]
fn retry_waits_for_the_oldest_entries_to_leave() {
    let alg = SlidingLog::new(3, SECOND).unwrap();
    let mut state = None;
    for (now, cost) in [(0, 1), (100, 2)] {
        let (d, s) = alg.decide(state, now, cost);
        assert!(d.allowed);
        state = s;
    }
    let (d, _) = alg.decide(state.clone(), 500, 1);
    assert!(!d.allowed);
    assert_eq!(d.retry_after, Some(SECOND - 500));
    // Cost 2 needs the entry at 100 gone too.
    let (d, _) = alg.decide(state.clone(), 500, 2);
    assert_eq!(d.retry_after, Some(SECOND + 100 - 500));
    assert_eq!(d.reset_after, SECOND + 100 - 500);
    let (d, _) = alg.decide(state, 500, 4);
    assert_eq!(d.retry_after, None);
}

#[test]
fn state_is_bounded_by_the_limit() {
    let alg = SlidingLog::new(100, SECOND).unwrap();
    let mut state = None;
    for now in 0..10_000 {
        state = alg.decide(state, now * 7, 1).1;
    }
    let bytes = alg.encode_to_vec(&state.unwrap());
    assert!(bytes.len() <= 10 + 100 * 16);
}

#[test]
fn limit_is_capped() {
    assert!(SlidingLog::new(MAX_LOG_LIMIT, SECOND).is_ok());
    assert!(SlidingLog::new(MAX_LOG_LIMIT + 1, SECOND).is_err());
}
