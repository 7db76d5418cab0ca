//! Waiting in line on the real clock: a waiter sleeps once, for the delay its
//! reservation was given, and admitted waiters are spaced as the algorithm says.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sluicegate_core::memory::DirectLimiter;
use sluicegate_core::{Pacing, TokenBucket, SECOND};

/// A sleeper woken late on a loaded machine: less than the 250 ms a slot missed would be.
const SLACK: Duration = Duration::from_millis(200);

#[test]
fn acquire_returns_within_its_timeout() {
    // One token, refilled every 2 s.
    let limiter = DirectLimiter::new(TokenBucket::new(1, 1, 2 * SECOND).unwrap());
    let before = Instant::now();
    assert!(limiter.acquire(1, Duration::ZERO).is_ok());
    // The next token is about 2 s away: a 1 s timeout gives up at once.
    let start = Instant::now();
    let denied = limiter.acquire(1, Duration::from_secs(1)).unwrap_err();
    // At once: 800 ms late allowed on a loaded machine, short of the 1 s it could sleep.
    assert!(start.elapsed() < Duration::from_millis(800));
    // Retrying with the same timeout succeeds once the token is 1 s away: counted from
    // the first decision on the limiter's own clock, 1 s less at most the time measured
    // around both calls (1 ms for whole ticks).
    let retry = Duration::from_micros(denied.retry_after.unwrap());
    let between = before.elapsed() + Duration::from_millis(1);
    assert!(
        retry <= Duration::from_secs(1) && retry + between >= Duration::from_secs(1),
        "{retry:?} after {between:?}"
    );
    // A 4 s timeout waits for it, and no longer than it must.
    let start = Instant::now();
    let admitted = limiter.acquire(1, Duration::from_secs(4)).unwrap();
    let waited = start.elapsed();
    assert!(admitted.delay > 0);
    assert!(
        waited >= Duration::from_micros(admitted.delay),
        "{waited:?}"
    );
    // 1 s late allowed on a loaded machine; sleeping the whole timeout takes 4 s.
    assert!(
        waited < Duration::from_micros(admitted.delay) + Duration::from_secs(1),
        "{waited:?}"
    );
}

#[test]
fn waiters_on_threads_are_spaced_by_the_interval() {
    // A pacing queue of 4 per second: one request every 250 ms.
    let interval = Duration::from_millis(250);
    let limiter = Arc::new(DirectLimiter::new(Pacing::new(10, 4, SECOND).unwrap()));
    let start = Instant::now();
    let handles: Vec<_> = (0..6)
        .map(|_| {
            let limiter = Arc::clone(&limiter);
            std::thread::spawn(move || {
                let called = start.elapsed();
                let admitted = limiter.acquire(1, Duration::from_secs(5));
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
