//! Waiting in line on the real clock: a waiter sleeps once, for the delay its
//! reservation was given, and admitted waiters are spaced as the algorithm says.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sluicegate_core::memory::DirectLimiter;
use sluicegate_core::{Pacing, TokenBucket, SECOND};

/// Scheduling noise allowed on a busy machine.
const SLACK: Duration = Duration::from_millis(40);

#[test]
fn acquire_returns_within_its_timeout() {
    // One token, refilled every 200 ms.
    let limiter = DirectLimiter::new(TokenBucket::new(1, 5, SECOND).unwrap());
    assert!(limiter.acquire(1, Duration::ZERO).is_ok());
    let start = Instant::now();
    // The next token is 200 ms away: a 50 ms timeout gives up at once.
    let denied = limiter.acquire(1, Duration::from_millis(50)).unwrap_err();
    assert!(start.elapsed() < SLACK);
    // Retrying with the same timeout succeeds once the token is 50 ms away.
    let retry = Duration::from_micros(denied.retry_after.unwrap());
    assert!(retry > Duration::from_millis(100) && retry <= Duration::from_millis(150));
    // A 300 ms timeout waits for it, and no longer than it must.
    let admitted = limiter.acquire(1, Duration::from_millis(300)).unwrap();
    let waited = start.elapsed();
    assert!(admitted.delay > 150_000);
    assert!(
        waited >= Duration::from_micros(admitted.delay),
        "{waited:?}"
    );
    assert!(waited < Duration::from_millis(200) + SLACK, "{waited:?}");
}

#[test]
fn waiters_on_threads_are_spaced_by_the_interval() {
    // A pacing queue of 20 per second: one request every 50 ms.
    let interval = Duration::from_millis(50);
    let limiter = Arc::new(DirectLimiter::new(Pacing::new(10, 20, SECOND).unwrap()));
    let start = Instant::now();
    let handles: Vec<_> = (0..6)
        .map(|_| {
            let limiter = Arc::clone(&limiter);
            std::thread::spawn(move || {
                let called = start.elapsed();
                let admitted = limiter.acquire(1, Duration::from_secs(2));
                assert!(admitted.is_ok());
                (start.elapsed(), called)
            })
        })
        .collect();
    let mut acted: Vec<(Duration, Duration)> =
        handles.into_iter().map(|h| h.join().unwrap()).collect();
    acted.sort();
    // Waiter k acts no earlier than its slot, and no later than the slack after the
    // later of its slot and the moment its thread called (a thread started late on a
    // busy machine is paced from its call, as the algorithm says).
    let mut due: Option<Duration> = None;
    for (k, (at, called)) in acted.iter().enumerate() {
        let slot = interval * u32::try_from(k).unwrap();
        let next = due.map_or(*called, |last| (last + interval).max(*called));
        due = Some(next);
        assert!(
            *at >= slot && *at < next + SLACK,
            "waiter {k} called at {called:?}, acted at {at:?}"
        );
    }
}
