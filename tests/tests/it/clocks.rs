//! The clock/state split end to end: hosts read a clock at the edge and hand `now` to
//! the pure core.

use sluicegate_core::{Algorithm, Clock, ManualClock, SystemClock, TokenBucket, SECOND};

#[test]
fn system_clock_counts_microseconds_since_the_epoch() {
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    let now = SystemClock.now();
    let after = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    assert!(u128::from(now) >= before.as_micros() && u128::from(now) <= after.as_micros());
}

#[test]
fn manual_clock_drives_a_limiter() {
    let clock = ManualClock::new(10 * SECOND);
    let bucket = TokenBucket::new(2, 1, SECOND).unwrap();
    let mut state = None;
    let mut admitted = 0;
    for _ in 0..10 {
        for _ in 0..3 {
            let (d, next) = bucket.decide(state, clock.now(), 1);
            admitted += u32::from(d.allowed);
            state = next;
        }
        clock.advance(SECOND);
    }
    // 2 at once, then one per second for the 9 seconds advanced within the loop.
    assert_eq!(admitted, 2 + 9);
    // The clock never goes backwards.
    clock.set(0);
    assert_eq!(clock.now(), 20 * SECOND);
}
