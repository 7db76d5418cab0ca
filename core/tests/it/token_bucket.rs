use crate::common::*;
use proptest::prelude::*;
use sluicegate_core::{Algorithm, ParamError, TokenBucket, MILLISECOND, SECOND};

// Decided as tokens refilled and taken (see `bucket_reference`).
bucket_properties!(TokenBucket, filling = true);

proptest! {
    /// A reservation is admitted iff the request would be admitted by waiting at most
    /// `max_wait`, and its delay is exactly the wait a plain decision would report.
    #[test]
    fn reservations_wait_exactly((capacity, rate, period) in bucket_params(), raw in raw_arrivals(), max_wait in prop_oneof![0..10u64, 0..=10 * SECOND]) {
        use sluicegate_core::Reserve;
        let Ok(alg) = TokenBucket::new(capacity, rate, period) else { return Ok(()) };
        let mut state = None;
        for (now, cost) in arrivals(&raw, period, capacity) {
            let plain = alg.peek(state, now, cost);
            let (d, next) = alg.reserve(state, now, cost, max_wait);
            match plain.retry_after {
                Some(wait) if wait <= max_wait => {
                    prop_assert!(d.allowed);
                    prop_assert_eq!(d.delay, wait);
                }
                _ => prop_assert!(!d.allowed),
            }
            if !d.allowed {
                // The reservation is admitted at exactly `now + retry_after`.
                if let Some(retry) = d.retry_after {
                    prop_assert!(alg.reserve(state, now + retry, cost, max_wait).0.allowed);
                    prop_assert!(!alg.reserve(state, now + retry - 1, cost, max_wait).0.allowed);
                }
            }
            state = next;
        }
    }
}

/// The multi-permit acquire of a policy service: `max_permits` 10 refilled at 5 per second.
#[test]
fn multi_permit_acquire() {
    let bucket = TokenBucket::new(10, 5, SECOND).unwrap();
    let (d, state) = bucket.decide(None, 0, 4);
    assert!(d.allowed);
    assert_eq!(d.remaining, 6);
    assert_eq!(d.reset_after, 800 * MILLISECOND);
    let (d, same) = bucket.decide(state, 0, 7);
    assert!(!d.allowed);
    assert_eq!(same, state);
    assert_eq!(d.retry_after, Some(200 * MILLISECOND));
    let (d, state) = bucket.decide(state, 200 * MILLISECOND, 7);
    assert!(d.allowed);
    assert_eq!(d.remaining, 0);
    // More than the bucket holds can never be had.
    assert_eq!(bucket.decide(state, SECOND, 11).0.retry_after, None);
}

#[test]
fn refill_is_exact_at_fractional_intervals() {
    // 3 tokens per second: one every 333 333.33 µs. Emptied at 0 and never full again,
    // so no fraction is lost to the cap.
    let bucket = TokenBucket::new(2, 3, SECOND).unwrap();
    let (_, mut state) = bucket.decide(None, 0, 2);
    for k in 1..=30u64 {
        let due = (k * SECOND).div_ceil(3);
        assert!(!bucket.peek(state, due - 1, 1).allowed);
        let (d, next) = bucket.decide(state, due, 1);
        assert!(d.allowed, "token {k} not there at {due}");
        state = next;
    }
}

#[test]
fn horizon_is_enforced() {
    assert!(matches!(
        TokenBucket::new(1_000_000_000, 1, 366 * 24 * 3600 * SECOND),
        Err(ParamError::HorizonTooLong { .. })
    ));
    assert!(TokenBucket::new(1_000_000_000, 1_000_000_000, 366 * 24 * 3600 * SECOND).is_ok());
    assert!(TokenBucket::new(0, 1, SECOND).is_err());
    assert!(TokenBucket::new(1, 0, SECOND).is_err());
}
