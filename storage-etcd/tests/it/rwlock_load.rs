//! The lock family on a real etcd under load: no writer beside another holder with
//! fenced writes, one wake per release, and the same grant order as the memory host.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sluicegate_core::memory::{FencedResource, RwLeases};
use sluicegate_core::rwlock::{LockMode, RwLease};
use sluicegate_core::{Concurrency, LeaseRequest, SECOND};
use sluicegate_etcd::EtcdRwLock;
use sluicegate_test_support::etcd::Etcd;
use tokio::task::JoinHandle;

use crate::rwlock::{ask, holding, rw, until_waiting, EXCLUSIVE, SHARED};

/// Who holds the lock now, as the holders themselves record it.
#[derive(Default)]
struct Holds {
    readers: u64,
    writer: bool,
    grants: u64,
    exclusive: u64,
}

/// Eight tasks take the lock for 3 s with random modes (a third writers), each holding
/// 1 to 4 ms: no writer ever overlaps another holder, writes carry the token, and a
/// former writer's token is refused once a newer writer has written.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_writer_beside_another_holder_and_stale_writes_refused() {
    let etcd = Etcd::start();
    let lock = rw(&etcd).await;
    let holds = Arc::new(Mutex::new(Holds::default()));
    let resource = Arc::new(FencedResource::new(0u64));
    let stale = Arc::new(AtomicU64::new(0));
    let end = Instant::now() + Duration::from_secs(3);
    let mut tasks = Vec::new();
    for t in 0..8u64 {
        let (lock, holds, resource, stale) =
            (lock.clone(), holds.clone(), resource.clone(), stale.clone());
        tasks.push(tokio::spawn(async move {
            let owner = format!("task{t}");
            let mut seed = t.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            let mut last_write = None;
            while Instant::now() < end {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let mode = if seed % 3 == 0 { EXCLUSIVE } else { SHARED };
                let ask = LeaseRequest::new("job").owner(&owner).ttl(2 * SECOND);
                let acquired = lock.acquire(&ask, mode, Duration::from_secs(10)).await;
                let grant = acquired.unwrap().grant.expect("granted within 10 s");
                {
                    let mut h = holds.lock().unwrap();
                    assert!(!h.writer, "a holder beside a writer");
                    if mode == EXCLUSIVE {
                        assert_eq!(h.readers, 0, "a writer beside readers");
                        h.writer = true;
                        h.exclusive += 1;
                    } else {
                        h.readers += 1;
                    }
                    h.grants += 1;
                }
                if mode == SHARED {
                    // A reader's token is above every writer's before it.
                    assert!(grant.token > resource.highest_token());
                }
                if mode == EXCLUSIVE {
                    resource.write(grant.token, |v| *v += 1).unwrap();
                    // A write with this task's previous writer token is stale once a
                    // newer writer (this one) has written.
                    if let Some(old) = last_write.replace(grant.token) {
                        assert!(resource.write(old, |v| *v += 1).is_err());
                        stale.fetch_add(1, Ordering::Relaxed);
                    }
                }
                tokio::time::sleep(Duration::from_millis(1 + seed % 4)).await;
                {
                    let mut h = holds.lock().unwrap();
                    if mode == EXCLUSIVE {
                        h.writer = false;
                    } else {
                        h.readers -= 1;
                    }
                }
                assert_eq!(lock.release(&ask).await.unwrap().holds, 0);
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let h = holds.lock().unwrap();
    println!(
        "{} grants, {} exclusive, {} stale writes refused",
        h.grants,
        h.exclusive,
        stale.load(Ordering::Relaxed)
    );
    assert!(
        h.grants > 20 && h.exclusive > 5,
        "{} {}",
        h.grants,
        h.exclusive
    );
    assert_eq!(resource.refused(), stale.load(Ordering::Relaxed));
}

/// `n` waiters queued on the lock `job` in `mode`, one after another, each releasing
/// once granted and answering how many wakes it was delivered.
async fn queue(lock: &EtcdRwLock, n: usize, mode: LockMode) -> Vec<JoinHandle<u64>> {
    let mut tasks = Vec::new();
    for i in 0..n {
        let own = lock.clone().counted_apart();
        tasks.push(tokio::spawn(async move {
            let owner = format!("w{i}");
            let ask = ask(&owner);
            let granted = own.acquire(&ask, mode, Duration::from_secs(60)).await;
            assert!(granted.unwrap().grant.is_some());
            assert_eq!(own.release(&ask).await.unwrap().holds, 0);
            own.wakes()
        }));
        until_waiting(lock, "job", i + 1).await;
    }
    tasks
}

async fn wakes_of(tasks: Vec<JoinHandle<u64>>) -> Vec<u64> {
    let mut wakes = Vec::new();
    for task in tasks {
        wakes.push(task.await.unwrap());
    }
    wakes
}

/// Forty writers queue behind a holder; each holder hands over to the next: each
/// release wakes one waiter only (one watch event each), not the whole line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_release_wakes_one_waiter() {
    const WAITERS: usize = 40;
    let etcd = Etcd::start();
    let lock = holding(&etcd, "first").await;
    let tasks = queue(&lock, WAITERS, EXCLUSIVE).await;
    assert_eq!(lock.release(&ask("first")).await.unwrap().holds, 0);
    let wakes = wakes_of(tasks).await;
    let total: u64 = wakes.iter().sum();
    println!("{WAITERS} waiters, {WAITERS} releases: {total} wakes, per waiter {wakes:?}");
    assert!(wakes.iter().all(|&w| w == 1), "{wakes:?}");
    assert_eq!(total, WAITERS as u64);
}

/// Thirty readers queue on a counted lock of two held by two: each release wakes at
/// most two waiters (the first behind the count, then the one behind it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_release_of_a_counted_lock_wakes_two_at_most() {
    const WAITERS: usize = 30;
    let etcd = Etcd::start();
    let lock = rw(&etcd).await.counted(Concurrency::new(2).unwrap());
    for owner in ["first", "second"] {
        assert!(lock
            .try_acquire(&ask(owner), SHARED)
            .await
            .unwrap()
            .grant
            .is_some());
    }
    let tasks = queue(&lock, WAITERS, SHARED).await;
    for owner in ["first", "second"] {
        assert_eq!(lock.release(&ask(owner)).await.unwrap().holds, 0);
    }
    let wakes = wakes_of(tasks).await;
    let total: u64 = wakes.iter().sum();
    let releases = WAITERS as u64 + 2;
    println!("{WAITERS} waiters, {releases} releases: {total} wakes, per waiter {wakes:?}");
    assert!(
        total <= 2 * releases,
        "{total} wakes for {releases} releases"
    );
}

/// The arrivals of the differential: while `h` holds exclusively, these owners ask in
/// this order.
const SCRIPT: [(&str, LockMode); 11] = [
    ("a", SHARED),
    ("b", EXCLUSIVE),
    ("c", SHARED),
    ("d", SHARED),
    ("e", EXCLUSIVE),
    ("f", EXCLUSIVE),
    ("g", SHARED),
    ("h2", SHARED),
    ("i", EXCLUSIVE),
    ("j", SHARED),
    ("k", SHARED),
];

/// The steps of the differential: after each release of everyone granted, the set of
/// owners granted next. Tokens differ by host (etcd's are revisions, memory's the
/// clock), so the order is compared, not the values.
type Steps = Vec<BTreeSet<String>>;

/// How long a step waits for no more grants to arrive.
const SETTLE: Duration = Duration::from_millis(300);

fn steps_from(
    granted: &std::sync::mpsc::Receiver<String>,
    mut release: impl FnMut(&BTreeSet<String>),
) -> Steps {
    let mut steps: Steps = Vec::new();
    while steps.iter().map(BTreeSet::len).sum::<usize>() < SCRIPT.len() {
        let mut step = BTreeSet::new();
        while let Ok(owner) = granted.recv_timeout(SETTLE) {
            step.insert(owner);
        }
        if step.is_empty() {
            break;
        }
        release(&step);
        steps.push(step);
    }
    steps
}

#[test]
fn the_same_grant_order_as_the_memory_host() {
    let memory = memory_steps(RwLease::read_write().fair());
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let etcd = runtime.block_on(etcd_steps(None));
    assert_eq!(etcd, memory);
    assert!(memory.len() >= 6, "{memory:?}");
}

/// The same on a counted lock of two, where readers also wait for the count.
#[test]
fn the_same_counted_grant_order_as_the_memory_host() {
    let two = Concurrency::new(2).unwrap();
    let memory = memory_steps(RwLease::counted(two).fair());
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let etcd = runtime.block_on(etcd_steps(Some(two)));
    assert_eq!(etcd, memory);
    assert!(memory.iter().all(|step| step.len() <= 2), "{memory:?}");
    assert!(memory.len() >= 8, "{memory:?}");
}

fn memory_steps(lease: RwLease) -> Steps {
    let lock = RwLeases::new(lease);
    let first = lock.try_acquire(b"h", EXCLUSIVE, 30 * SECOND).unwrap();
    let (granted_tx, granted) = std::sync::mpsc::channel();
    std::thread::scope(|scope| {
        let mut releases = std::collections::BTreeMap::new();
        for (i, (owner, mode)) in SCRIPT.into_iter().enumerate() {
            let (release_tx, release) = std::sync::mpsc::channel::<()>();
            releases.insert(owner.to_owned(), release_tx);
            let (lock, granted_tx) = (&lock, granted_tx.clone());
            scope.spawn(move || {
                let long = Duration::from_secs(30);
                let guard = lock.acquire(owner.as_bytes(), mode, 30 * SECOND, long, None);
                let guard = guard.unwrap();
                granted_tx.send(owner.to_owned()).unwrap();
                release.recv().unwrap();
                assert_eq!(guard.release().unwrap().holds, 0);
            });
            for _ in 0..500 {
                if lock.blocked() == i + 1 {
                    break;
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            assert_eq!(lock.blocked(), i + 1);
        }
        assert_eq!(first.release().unwrap().holds, 0);
        steps_from(&granted, |step| {
            for owner in step {
                releases[owner].send(()).unwrap();
            }
        })
    })
}

async fn etcd_steps(counted: Option<Concurrency>) -> Steps {
    let etcd = Etcd::start();
    let lock = rw(&etcd).await;
    let lock = counted.map_or(lock.clone(), |c| lock.counted(c));
    assert!(lock
        .try_acquire(&ask("h"), EXCLUSIVE)
        .await
        .unwrap()
        .grant
        .is_some());
    let (granted_tx, granted) = std::sync::mpsc::channel();
    let mut releases = std::collections::BTreeMap::new();
    for (i, (owner, mode)) in SCRIPT.into_iter().enumerate() {
        let (release_tx, release) = tokio::sync::oneshot::channel::<()>();
        releases.insert(owner.to_owned(), release_tx);
        let (l, granted_tx) = (lock.clone(), granted_tx.clone());
        tokio::spawn(async move {
            let ask = ask(owner);
            let acquired = l.acquire(&ask, mode, Duration::from_secs(30)).await;
            assert!(acquired.unwrap().grant.is_some());
            granted_tx.send(owner.to_owned()).unwrap();
            release.await.unwrap();
            assert_eq!(l.release(&ask).await.unwrap().holds, 0);
        });
        until_waiting(&lock, "job", i + 1).await;
    }
    assert_eq!(lock.release(&ask("h")).await.unwrap().holds, 0);
    // The grants are read on a thread of its own: the tasks keep running meanwhile.
    let (steps, releases) = tokio::task::spawn_blocking(move || {
        let mut releases = releases;
        let steps = steps_from(&granted, |step| {
            for owner in step {
                let _ = releases.remove(owner).unwrap().send(());
            }
        });
        (steps, releases)
    })
    .await
    .unwrap();
    assert!(releases.is_empty());
    steps
}
