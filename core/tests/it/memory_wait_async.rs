//! Waiting in line in async tasks (the `tokio` feature): `acquire_async` sleeps once
//! on tokio's timer, and admitted waiters are spaced as the algorithm says.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sluicegate_core::memory::KeyedLimiter;
use sluicegate_core::{Pacing, SECOND};

/// A task woken late on a loaded machine: less than the 250 ms a slot missed would be.
const SLACK: Duration = Duration::from_millis(200);

#[tokio::test]
async fn async_waiters_are_spaced_by_the_interval() {
    // One request every 250 ms.
    let interval = Duration::from_millis(250);
    let limiter = Arc::new(KeyedLimiter::new(Pacing::new(10, 4, SECOND).unwrap(), 100));
    let start = Instant::now();
    let tasks: Vec<_> = (0..6)
        .map(|_| {
            let limiter = Arc::clone(&limiter);
            tokio::spawn(async move {
                let called = start.elapsed();
                let admitted = limiter
                    .acquire_async("route", 1, Duration::from_secs(5))
                    .await;
                assert!(admitted.is_ok());
                (start.elapsed(), called)
            })
        })
        .collect();
    let mut acted = Vec::new();
    for task in tasks {
        acted.push(task.await.unwrap());
    }
    acted.sort();
    // Waiter k acts no earlier than its slot (counted from `start`, before any call), and
    // within the slack after the later of its slot and its call (a task run late on a
    // loaded machine is paced from its call, as the algorithm says).
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
    // Another key has its own queue.
    let other = limiter
        .acquire_async("other", 1, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(other.delay, 0);
}
