use crate::common::*;
use proptest::prelude::*;
use sluicegate_core::{Algorithm, LeakyBucket, SECOND};

// Decided as water poured in and leaking out (see `bucket_reference`).
bucket_properties!(LeakyBucket, filling = false);

/// The funnel example: a funnel of capacity 15 leaking 0.5 per second, called 20 times at once.
#[test]
fn funnel_of_fifteen() {
    let funnel = LeakyBucket::new(15, 1, 2 * SECOND).unwrap();
    let mut state = None;
    let mut allowed = Vec::new();
    for _ in 0..20 {
        let (d, s) = funnel.decide(state, 0, 1);
        allowed.push(d.allowed);
        state = s;
    }
    assert_eq!(allowed, [vec![true; 15], vec![false; 5]].concat());
    // One unit leaks out every 2 s.
    let d = funnel.peek(state, 0, 1);
    assert_eq!(d.retry_after, Some(2 * SECOND));
    assert_eq!(d.reset_after, 30 * SECOND);
}

/// The funnel as redis-cell's `CL.THROTTLE laoqian:reply 15 30 60`: limit 16, remaining 15, reset 2 s,
/// exact to the microsecond.
#[test]
fn funnel_as_cl_throttle() {
    let cell = LeakyBucket::redis_cell(15, 30, 60 * SECOND).unwrap();
    let (d, mut state) = cell.decide(None, 0, 1);
    assert_eq!(d.cl_throttle_reply(), [0, 16, 15, -1, 2 * SECOND as i64]);
    for _ in 1..16 {
        state = cell.decide(state, 0, 1).1;
    }
    let (d, _) = cell.decide(state, 0, 1);
    assert_eq!(
        d.cl_throttle_reply(),
        [1, 16, 0, 2 * SECOND as i64, 32 * SECOND as i64]
    );
    // Half a second later the retry counts down exactly, not in whole seconds.
    let (d, _) = cell.decide(state, SECOND / 2, 1);
    assert_eq!(d.cl_throttle_reply(), [1, 16, 0, 1_500_000, 31_500_000]);
    // A quantity above the limit can never pass: redis-cell reports -1.
    assert_eq!(cell.peek(None, 0, 17).cl_throttle_reply()[3], -1);
}
