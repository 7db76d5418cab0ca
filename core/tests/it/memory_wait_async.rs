//! Waiting in line in async tasks (the `tokio` feature): `acquire_async` sleeps once
//! on tokio's timer, and admitted waiters are spaced as the algorithm says.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sluicegate_core::memory::KeyedLimiter;
use sluicegate_core::{Pacing, SECOND};

/// Scheduling noise allowed on a busy machine.
const SLACK: Duration = Duration::from_millis(40);

#[tokio::test]
async fn async_waiters_are_spaced_by_the_interval() {
    let interval = Duration::from_millis(50);
    let limiter = Arc::new(KeyedLimiter::new(Pacing::new(10, 20, SECOND).unwrap(), 100));
    let start = Instant::now();
    let tasks: Vec<_> = (0..6)
        .map(|_| {
            let limiter = Arc::clone(&limiter);
            tokio::spawn(async move {
                let admitted = limiter
                    .acquire_async("route", 1, Duration::from_secs(2))
                    .await;
                assert!(admitted.is_ok());
                start.elapsed()
            })
        })
        .collect();
    let mut acted = Vec::new();
    for task in tasks {
        acted.push(task.await.unwrap());
    }
    acted.sort();
    for (k, at) in acted.iter().enumerate() {
        let slot = interval * u32::try_from(k).unwrap();
        assert!(
            *at >= slot && *at < slot + SLACK,
            "waiter {k} acted at {at:?}"
        );
    }
    // Another key has its own queue.
    let other = limiter
        .acquire_async("other", 1, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(other.delay, 0);
}
