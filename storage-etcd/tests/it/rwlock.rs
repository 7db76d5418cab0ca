//! The lock family on a real etcd: the calls, tries that leave nothing behind, grants in
//! arrival order, and waits that end (deadline, cancel, drop, a dead waiter's ttl).

use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::{Client, GetOptions, PutOptions};
use sluicegate_core::rwlock::{LockMode, RwAcquired};
use sluicegate_core::{LeaseError, LeaseRequest, SECOND};
use sluicegate_etcd::{Error, EtcdRwLock};
use sluicegate_test_support::etcd::Etcd;
use tokio::sync::Mutex;

pub(crate) const SHARED: LockMode = LockMode::Shared;
pub(crate) const EXCLUSIVE: LockMode = LockMode::Exclusive;

pub(crate) async fn rw(etcd: &Etcd) -> EtcdRwLock {
    EtcdRwLock::connect(&[etcd.endpoint()])
        .await
        .unwrap()
        .with_prefix("t/")
}

/// `owner`'s lease on `job` in `mode`, which must be granted at once.
pub(crate) async fn granted(
    lock: &EtcdRwLock,
    owner: &str,
    mode: LockMode,
) -> sluicegate_core::Grant {
    let acquired = lock.try_acquire(&ask(owner), mode).await.unwrap();
    acquired.grant.expect("granted")
}

/// The lock `job` with `owner` holding it exclusively.
pub(crate) async fn holding(etcd: &Etcd, owner: &str) -> EtcdRwLock {
    let lock = rw(etcd).await;
    let taken = lock.try_acquire(&ask(owner), EXCLUSIVE).await.unwrap();
    assert!(taken.grant.is_some());
    lock
}

pub(crate) fn ask(owner: &str) -> LeaseRequest<'_> {
    LeaseRequest::new("job").owner(owner).ttl(30 * SECOND)
}

/// How many keys the lock `job` has in etcd (holders and waiters).
async fn keys(etcd: &Etcd) -> usize {
    let mut client = Client::connect([etcd.endpoint()], None).await.unwrap();
    let got = client
        .get("t/job/rw/", Some(GetOptions::new().with_prefix()))
        .await
        .unwrap();
    got.kvs().len()
}

/// Waits (bounded) until the lock `job` has `n` waiters.
pub(crate) async fn until_waiting(lock: &EtcdRwLock, key: &str, n: usize) {
    for _ in 0..500 {
        let state = lock.state(key.as_bytes()).await.unwrap();
        if state.is_some_and(|s| s.waiters().len() == n) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{n} waiters never queued on {key}");
}

/// `owner` waiting up to `wait` for the lock `job` in a task of its own, as a writer.
fn wait_for(
    lock: &EtcdRwLock,
    owner: &'static str,
    wait: Duration,
) -> tokio::task::JoinHandle<Result<RwAcquired, Error>> {
    let lock = lock.clone();
    tokio::spawn(async move { lock.acquire(&ask(owner), EXCLUSIVE, wait).await })
}

#[tokio::test]
async fn readers_share_a_writer_waits_and_its_token_is_above_theirs() {
    let etcd = Etcd::start();
    let lock = rw(&etcd).await;
    let a = lock.try_acquire(&ask("a"), SHARED).await.unwrap();
    let b = lock.try_acquire(&ask("b"), SHARED).await.unwrap();
    let (a, b) = (a.grant.unwrap(), b.grant.unwrap());
    assert!(b.token > a.token);
    // A refused try leaves no key behind, and says when the blocker's lease ends.
    let refused = lock.try_acquire(&ask("w"), EXCLUSIVE).await.unwrap();
    assert!(refused.grant.is_none() && refused.place.is_none());
    let retry = refused.decision.retry_after.unwrap();
    assert!(retry > 25 * SECOND && retry <= 30 * SECOND, "{retry}");
    assert_eq!(keys(&etcd).await, 2);
    // Re-entry keeps the token; a reader asking to write is refused, never queued.
    let again = granted(&lock, "a", SHARED).await;
    assert_eq!((again.token, again.holds), (a.token, 2));
    let upgrade = lock
        .acquire(&ask("a"), EXCLUSIVE, Duration::from_secs(1))
        .await;
    let upgrade = upgrade.unwrap();
    assert!(upgrade.grant.is_none() && upgrade.place.is_none());
    // A writer queues behind the readers; a reader after it queues behind it.
    let writer = wait_for(&lock, "w", Duration::from_secs(20));
    until_waiting(&lock, "job", 1).await;
    let late = lock.try_acquire(&ask("c"), SHARED).await.unwrap();
    assert!(
        late.grant.is_none(),
        "writer preference: a new reader waits"
    );
    let state = lock.state(b"job").await.unwrap().unwrap();
    assert_eq!(state.holders().len(), 2);
    assert_eq!(state.waiters()[0].owner(), b"w");
    assert_eq!(state.waiters()[0].mode(), EXCLUSIVE);
    assert_eq!(lock.release(&ask("a")).await.unwrap().holds, 1);
    assert_eq!(lock.release(&ask("a")).await.unwrap().holds, 0);
    let not_held = lock.release(&ask("a")).await.unwrap_err();
    assert!(matches!(not_held, Error::Lease(LeaseError::NotHeld)));
    assert_eq!(lock.release(&ask("b")).await.unwrap().holds, 0);
    let w = writer.await.unwrap().unwrap().grant.unwrap();
    assert!(
        w.token > b.token,
        "a writer's token is above every earlier token"
    );
    // Renewal keeps the token; a writer re-enters when it asks to read.
    let renewed = lock.renew(&ask("w").ttl(60 * SECOND)).await.unwrap();
    assert_eq!(renewed.token, w.token);
    let read = granted(&lock, "w", SHARED).await;
    assert_eq!((read.token, read.holds), (w.token, 2));
    let at = lock.try_acquire(&ask("x").at(5), SHARED).await.unwrap_err();
    assert!(matches!(at, Error::ExplicitTime));
    let bad = lock.try_acquire(&ask("").ttl(SECOND), SHARED).await;
    assert!(matches!(
        bad.unwrap_err(),
        Error::Lease(LeaseError::Param(_))
    ));
}

/// Writers and readers granted in the order they asked: the largest overtaking is 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_go_in_arrival_order() {
    let etcd = Etcd::start();
    let lock = holding(&etcd, "first").await;
    let modes = [
        EXCLUSIVE, SHARED, SHARED, EXCLUSIVE, EXCLUSIVE, SHARED, EXCLUSIVE, SHARED, SHARED, SHARED,
        EXCLUSIVE, EXCLUSIVE,
    ];
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for (i, mode) in modes.into_iter().enumerate() {
        let (l, order) = (lock.clone(), order.clone());
        tasks.push(tokio::spawn(async move {
            let owner = format!("w{i}");
            let ask = ask(&owner);
            let grant = l.acquire(&ask, mode, Duration::from_secs(30)).await;
            assert!(grant.unwrap().grant.is_some());
            order.lock().await.push(i);
            tokio::time::sleep(Duration::from_millis(20)).await;
            assert_eq!(l.release(&ask).await.unwrap().holds, 0);
        }));
        until_waiting(&lock, "job", i + 1).await;
    }
    assert_eq!(lock.release(&ask("first")).await.unwrap().holds, 0);
    for task in tasks {
        task.await.unwrap();
    }
    let order = order.lock().await.clone();
    // Readers granted together may record in any order; a writer overtakes nobody and
    // is overtaken by nobody.
    let mut overtaking = 0;
    for (at, &i) in order.iter().enumerate() {
        let earlier = order[at + 1..].iter().filter(|&&j| j < i);
        let writer = |k: usize| modes[k] == EXCLUSIVE;
        overtaking = overtaking.max(earlier.filter(|&&j| writer(i) || writer(j)).count());
    }
    assert_eq!(overtaking, 0, "{order:?}");
}

/// A writer's key for the owner `dead` as the family writes it: one hold, exclusive, the
/// token its `create_revision`.
pub(crate) fn dead_writer() -> Vec<u8> {
    [&1u64.to_be_bytes()[..], &[1], &0u64.to_be_bytes(), b"dead"].concat()
}

/// A waiter whose process died (its key on a lease nobody keeps alive) blocks the line
/// only until its lease expires.
#[tokio::test]
async fn a_dead_waiter_blocks_no_longer_than_its_ttl() {
    let etcd = Etcd::start();
    let lock = holding(&etcd, "holder").await;
    // The key a waiter writes, as if it had asked and then died: a 1 s lease.
    let mut client = Client::connect([etcd.endpoint()], None).await.unwrap();
    let lease = client.lease_grant(1, None).await.unwrap().id();
    let value = dead_writer();
    let options = PutOptions::new().with_lease(lease);
    let dead = "t/job/rw/64656164";
    client.put(dead, value, Some(options)).await.unwrap();
    let next = {
        let lock = lock.clone();
        tokio::spawn(async move {
            let ask = ask("next");
            let granted = lock.acquire(&ask, EXCLUSIVE, Duration::from_secs(20)).await;
            (granted.unwrap().grant.is_some(), Instant::now())
        })
    };
    until_waiting(&lock, "job", 2).await;
    let state = lock.state(b"job").await.unwrap().unwrap();
    assert_eq!(state.waiters()[0].owner(), b"dead");
    let released = Instant::now();
    assert_eq!(lock.release(&ask("holder")).await.unwrap().holds, 0);
    let (granted, at) = next.await.unwrap();
    assert!(granted);
    // Its lease had at most 1 s left (etcd's minimum here); etcd's expiry sweep runs
    // every 500 ms.
    let waited = at - released;
    assert!(waited < Duration::from_millis(2500), "{waited:?}");
}

/// A wait that ends without a grant leaves no key: at its deadline, cancelled, or
/// dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ended_wait_leaves_no_place_behind() {
    let etcd = Etcd::start();
    let lock = rw(&etcd).await;
    assert!(lock
        .try_acquire(&ask("holder"), SHARED)
        .await
        .unwrap()
        .grant
        .is_some());
    let w = ask("w");
    let timed_out = lock.acquire(&w, EXCLUSIVE, Duration::from_millis(300));
    let timed_out = timed_out.await.unwrap();
    assert!(timed_out.grant.is_none());
    assert!(timed_out.decision.retry_after.unwrap() > 25 * SECOND);
    assert_eq!(keys(&etcd).await, 1);
    let (cancel, cancelled) = tokio::sync::oneshot::channel::<()>();
    let waiting = {
        let lock = lock.clone();
        tokio::spawn(async move {
            let cancelled = async {
                let _ = cancelled.await;
            };
            let ask = ask("w");
            let long = Duration::from_secs(60);
            lock.acquire_until(&ask, EXCLUSIVE, long, cancelled).await
        })
    };
    until_waiting(&lock, "job", 1).await;
    cancel.send(()).unwrap();
    assert!(matches!(waiting.await.unwrap(), Err(Error::Cancelled)));
    assert_eq!(keys(&etcd).await, 1);
    let dropped = wait_for(&lock, "w", Duration::from_secs(60));
    until_waiting(&lock, "job", 1).await;
    dropped.abort();
    let _ = dropped.await;
    for _ in 0..200 {
        if keys(&etcd).await == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(keys(&etcd).await, 1, "a dropped wait revokes its place");
    // The holder's release leaves the lock empty, and the next writer is granted at once.
    assert_eq!(lock.release(&ask("holder")).await.unwrap().holds, 0);
    let w = lock.try_acquire(&ask("w"), EXCLUSIVE).await.unwrap();
    assert!(w.grant.is_some());
}
