//! The in-process lock family in async tasks (the `tokio` feature): `acquire_async`
//! sleeps until its turn and is woken once, writers stay alone, and a wait that ends
//! without a grant (cancelled, dropped, at its deadline) gives up its place.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sluicegate_core::memory::{FencedResource, RwAcquireError, RwLeases, WaitCancel};
use sluicegate_core::rwlock::{LockMode, RwLease};

use crate::common::{LATE, LONG};

const LONG_WAIT: Duration = Duration::from_secs(30);

/// Polls `ready` until it holds, failing after 10 s.
async fn eventually(what: &str, ready: impl Fn() -> bool) {
    let start = Instant::now();
    while !ready() {
        assert!(start.elapsed() < Duration::from_secs(10), "never: {what}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

fn queued(host: &RwLeases) -> usize {
    host.state().map_or(0, |s| s.waiters().len())
}

/// Eight tasks take a fair read-write lock 50 times each, a third as writers, around a
/// read-modify-write of a fenced counter: no write is lost and none is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_take_turns_and_no_write_is_lost() {
    const TASKS: u64 = 8;
    const ROUNDS: u64 = 50;
    let host = Arc::new(RwLeases::new(RwLease::read_write().fair()));
    let resource = Arc::new(FencedResource::new(0u64));
    let tasks: Vec<_> = (0..TASKS)
        .map(|task| {
            let (host, resource) = (Arc::clone(&host), Arc::clone(&resource));
            tokio::spawn(async move {
                let owner = format!("t{task}");
                let mut wrote = 0;
                for round in 0..ROUNDS {
                    let mode = match (task + round) % 3 {
                        0 => LockMode::Exclusive,
                        _ => LockMode::Shared,
                    };
                    let guard = host.acquire_async(owner.as_bytes(), mode, LONG, LONG_WAIT, None);
                    let guard = guard.await.unwrap();
                    let seen = resource.read(|v| *v);
                    tokio::task::yield_now().await;
                    if mode == LockMode::Exclusive {
                        resource.write(guard.token(), |v| *v = seen + 1).unwrap();
                        wrote += 1;
                    }
                }
                wrote
            })
        })
        .collect();
    let mut writes = 0;
    for task in tasks {
        writes += task.await.unwrap();
    }
    assert!(writes > 100, "{writes}");
    assert_eq!(resource.read(|v| *v), writes);
    assert_eq!((host.blocked(), queued(&host)), (0, 0));
}

/// A release wakes the one task whose turn it is; a downgrade lets a waiting reader in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_or_a_downgrade_wakes_the_waiting_task_once() {
    let host = Arc::new(RwLeases::new(RwLease::read_write().fair()));
    for change in ["release", "downgrade"] {
        let mut holder = host
            .try_acquire(b"holder", LockMode::Exclusive, LONG)
            .unwrap();
        let waiter = {
            let host = Arc::clone(&host);
            tokio::spawn(async move {
                let asked = host.acquire_async(b"reader", LockMode::Shared, LONG, LONG_WAIT, None);
                let token = asked.await.unwrap().token();
                (token, Instant::now())
            })
        };
        eventually("the reader blocked", || host.blocked() == 1).await;
        let wakes = host.wakes();
        let at = Instant::now();
        match change {
            "release" => drop(holder),
            _ => {
                assert_eq!(holder.downgrade().unwrap().holds, 1);
                std::mem::forget(holder);
            }
        }
        let (token, granted) = waiter.await.unwrap();
        assert!(granted - at < LATE, "{change}: {:?}", granted - at);
        assert_eq!(host.wakes(), wakes + 1, "{change}");
        assert!(token > 0);
        assert_eq!((host.blocked(), queued(&host)), (0, 0));
    }
}

/// Cancelled by its handle, dropped, or at its deadline: the task's place is given up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ended_task_gives_up_its_place() {
    let host = Arc::new(RwLeases::new(RwLease::new(1).unwrap().fair()));
    let _holder = host
        .try_acquire(b"holder", LockMode::Exclusive, LONG)
        .unwrap();
    let cancel = WaitCancel::new();
    let cancelled = {
        let (host, cancel) = (Arc::clone(&host), cancel.clone());
        tokio::spawn(async move {
            let asked =
                host.acquire_async(b"w", LockMode::Exclusive, LONG, LONG_WAIT, Some(&cancel));
            asked.await.map(|g| g.token())
        })
    };
    eventually("queued", || queued(&host) == 1).await;
    cancel.cancel();
    assert_eq!(cancelled.await.unwrap(), Err(RwAcquireError::Cancelled));
    assert_eq!((host.blocked(), queued(&host)), (0, 0));
    // A future dropped by a timeout around it.
    let asked = host.acquire_async(b"w", LockMode::Exclusive, LONG, LONG_WAIT, None);
    assert!(tokio::time::timeout(Duration::from_millis(30), asked)
        .await
        .is_err());
    assert_eq!((host.blocked(), queued(&host)), (0, 0));
    // Its own deadline.
    let start = Instant::now();
    let late = host
        .acquire_async(
            b"w",
            LockMode::Exclusive,
            LONG,
            Duration::from_millis(30),
            None,
        )
        .await;
    assert!(matches!(late, Err(RwAcquireError::Busy(d)) if !d.allowed));
    assert!(start.elapsed() >= Duration::from_millis(30));
    assert_eq!((host.blocked(), queued(&host)), (0, 0));
}
