//! In-process leases in async tasks (the `tokio` feature): `acquire_async` sleeps until
//! a release or an expiry wakes it, and gives up at its deadline.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::{assert_prompt_wakes, LATE, LONG};
use sluicegate_core::memory::{AcquireError, FencedResource, KeyedLeases, Leases};
use sluicegate_core::{Concurrency, MILLISECOND, SECOND};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_two_tasks_take_a_lock_around_a_read_modify_write() {
    const TASKS: usize = 32;
    const ROUNDS: usize = 100;
    let lock = Arc::new(KeyedLeases::new(Concurrency::lock(), 100));
    let resource = Arc::new(FencedResource::new(0usize));
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let (lock, resource) = (Arc::clone(&lock), Arc::clone(&resource));
            tokio::spawn(async move {
                for _ in 0..ROUNDS {
                    let guard = lock
                        .acquire_async("ledger", None, LONG, Duration::from_secs(30))
                        .await
                        .unwrap();
                    let seen = resource.read(|v| *v);
                    tokio::task::yield_now().await;
                    resource.write(guard.token(), |v| *v = seen + 1).unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(resource.read(|v| *v), TASKS * ROUNDS);
    assert_eq!(resource.refused(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_wakes_an_async_waiter_at_once() {
    let lock = Arc::new(Leases::new(Concurrency::lock()));
    let mut latencies = Vec::new();
    for _ in 0..20 {
        let guard = lock.try_acquire(None, LONG).unwrap();
        let waiter = {
            let lock = Arc::clone(&lock);
            tokio::spawn(async move {
                let guard = lock
                    .acquire_async(None, LONG, Duration::from_secs(10))
                    .await
                    .unwrap();
                (Instant::now(), guard.token())
            })
        };
        // The waiter has ten seconds and the lease a minute: only the release wakes it.
        tokio::time::sleep(Duration::from_millis(20)).await;
        let released = Instant::now();
        drop(guard);
        let (woke, _) = waiter.await.unwrap();
        latencies.push(woke - released);
    }
    assert_prompt_wakes("async", latencies);
}

#[tokio::test]
async fn an_async_waiter_wakes_when_a_forgotten_lease_expires() {
    let lock = Leases::new(Concurrency::lock());
    let start = Instant::now();
    std::mem::forget(lock.try_acquire(None, 100 * MILLISECOND).unwrap());
    let guard = lock
        .acquire_async(None, LONG, Duration::from_secs(5))
        .await
        .unwrap();
    let waited = start.elapsed();
    assert!(waited >= Duration::from_millis(100), "{waited:?}");
    assert!(waited < Duration::from_millis(100) + LATE, "{waited:?}");
    drop(guard);
}

#[tokio::test]
async fn an_async_waiter_gives_up_at_its_deadline_and_a_dropped_one_holds_nothing() {
    let lock = Leases::new(Concurrency::new(1).unwrap());
    let held = lock.try_acquire(None, LONG).unwrap();
    let start = Instant::now();
    let denied = lock
        .acquire_async(None, LONG, Duration::from_millis(50))
        .await;
    let waited = start.elapsed();
    assert!(matches!(denied, Err(AcquireError::Busy(_))));
    assert!(waited >= Duration::from_millis(50) && waited < Duration::from_millis(50) + LATE);
    // A waiter cancelled while asleep takes nothing with it.
    let cancelled = tokio::time::timeout(
        Duration::from_millis(10),
        lock.acquire_async(None, LONG, Duration::from_secs(10)),
    )
    .await;
    assert!(cancelled.is_err());
    drop(held);
    assert!(lock.try_acquire(None, LONG).is_ok());
}

#[tokio::test]
async fn an_owned_guard_keeps_its_table_alive_and_releases_on_drop() {
    let table = Arc::new(KeyedLeases::new(Concurrency::lock(), 16));
    let guard = table
        .acquire_owned_async("k", None, SECOND, Duration::ZERO)
        .await
        .unwrap();
    assert!(matches!(
        table.try_acquire("k", None, SECOND),
        Err(AcquireError::Busy(_))
    ));
    // The guard holds the table, not a borrow: it outlives every other handle.
    let weak = Arc::downgrade(&table);
    drop(table);
    let table = weak.upgrade().expect("the guard keeps the table");
    drop(guard);
    let second = table.try_acquire("k", None, SECOND).unwrap();
    assert!(second.token() > 0);
    drop(second);
    drop(table);
    assert!(weak.upgrade().is_none(), "freed with its last handle");
}
