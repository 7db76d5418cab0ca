//! The lock family's changes of mode and counts on a real etcd: a sole reader's upgrade,
//! a writer's downgrade, a place asked again in another mode, counted locks and whom
//! their releases wake, and keys of the older layout.

use std::time::Duration;

use etcd_client::{Client, PutOptions};
use sluicegate_core::{Concurrency, LeaseError, SECOND};
use sluicegate_etcd::Error;

use crate::rwlock::{ask, dead_writer, granted, holding, rw, until_waiting, EXCLUSIVE, SHARED};
use sluicegate_test_support::etcd::Etcd;

/// `owner` waiting up to 20 s for the lock `job` in `mode`, in a task of its own: whether
/// it was granted, and its token.
fn waiter(
    lock: &sluicegate_etcd::EtcdRwLock,
    owner: &'static str,
    mode: sluicegate_core::rwlock::LockMode,
) -> tokio::task::JoinHandle<Option<u64>> {
    let lock = lock.clone();
    tokio::spawn(async move {
        let acquired = lock
            .acquire(&ask(owner), mode, Duration::from_secs(20))
            .await;
        acquired.unwrap().grant.map(|g| g.token)
    })
}

#[tokio::test]
async fn a_sole_reader_upgrades_with_a_token_above_every_grant() {
    let etcd = Etcd::start();
    let lock = rw(&etcd).await;
    let a = granted(&lock, "a", SHARED).await;
    let b = granted(&lock, "b", SHARED).await;
    // With another reader holding, refused and never queued; nothing changes.
    let refused = lock.try_acquire(&ask("a"), EXCLUSIVE).await.unwrap();
    assert!(refused.grant.is_none() && refused.place.is_none());
    let state = lock.state(b"job").await.unwrap().unwrap();
    assert!(state.holders().iter().all(|h| h.mode() == SHARED));
    assert_eq!(lock.release(&ask("b")).await.unwrap().holds, 0);
    // Alone, it is upgraded: a new token above b's, which was granted after a's.
    let up = lock.try_acquire(&ask("a"), EXCLUSIVE).await.unwrap();
    let up = up.grant.unwrap();
    assert!(up.token > b.token && b.token > a.token, "{up:?} {b:?}");
    assert_eq!(up.holds, 2);
    let state = lock.state(b"job").await.unwrap().unwrap();
    let holder = &state.holders()[0];
    assert_eq!((holder.mode(), holder.token()), (EXCLUSIVE, up.token));
    // A writer now: readers wait; renewal and release keep the upgrade's token.
    let reader = lock.try_acquire(&ask("c"), SHARED).await.unwrap();
    assert!(reader.grant.is_none());
    let renewed = lock.renew(&ask("a").ttl(60 * SECOND)).await.unwrap();
    assert_eq!(renewed.token, up.token);
    let released = lock.release(&ask("a")).await.unwrap();
    assert_eq!((released.token, released.holds), (up.token, 1));
    let state = lock.state(b"job").await.unwrap().unwrap();
    assert_eq!(state.holders()[0].token(), up.token);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_downgrade_lets_the_waiting_readers_in_and_not_the_writer() {
    let etcd = Etcd::start();
    let lock = holding(&etcd, "w").await;
    let token = lock.state(b"job").await.unwrap().unwrap().holders()[0].token();
    let r1 = waiter(&lock, "r1", SHARED);
    until_waiting(&lock, "job", 1).await;
    let r2 = waiter(&lock, "r2", SHARED);
    until_waiting(&lock, "job", 2).await;
    let w2 = waiter(&lock, "w2", EXCLUSIVE);
    until_waiting(&lock, "job", 3).await;
    // A key in line is not held; nor is one that does not exist.
    for owner in ["r1", "nobody"] {
        let not_held = lock.downgrade(&ask(owner)).await.unwrap_err();
        assert!(
            matches!(not_held, Error::Lease(LeaseError::NotHeld)),
            "{owner}"
        );
    }
    let down = lock.downgrade(&ask("w")).await.unwrap();
    assert_eq!((down.token, down.holds), (token, 1));
    // The readers behind it are granted while it still holds; the writer still waits.
    let (r1, r2) = (r1.await.unwrap().unwrap(), r2.await.unwrap().unwrap());
    assert!(r1 > token && r2 > r1);
    let state = lock.state(b"job").await.unwrap().unwrap();
    let holders: Vec<_> = state.holders().iter().map(|h| h.owner()).collect();
    assert_eq!(holders, [&b"w"[..], b"r1", b"r2"]);
    assert_eq!(state.waiters()[0].owner(), b"w2");
    assert!(!w2.is_finished());
    // A shared lease downgrades to itself.
    assert_eq!(lock.downgrade(&ask("r1")).await.unwrap().token, r1);
    for owner in ["w", "r1", "r2"] {
        assert_eq!(lock.release(&ask(owner)).await.unwrap().holds, 0);
    }
    assert!(w2.await.unwrap().unwrap() > r2);
}

/// A counted lock of two: two holders, then a line granted in order, one at a time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_counted_lock_holds_its_count_and_grants_in_order() {
    let etcd = Etcd::start();
    let two = Concurrency::new(2).unwrap();
    let lock = rw(&etcd).await.counted(two);
    assert_eq!(lock.lease().max_holders(), 2);
    let a = lock.try_acquire(&ask("a"), SHARED).await.unwrap();
    assert_eq!(a.decision.remaining, 1);
    let b = lock.try_acquire(&ask("b"), SHARED).await.unwrap();
    assert_eq!(b.decision.remaining, 0);
    let full = lock.try_acquire(&ask("c"), SHARED).await.unwrap();
    assert!(full.grant.is_none() && full.place.is_none());
    assert!(full.decision.retry_after.is_some());
    let r1 = waiter(&lock, "r1", SHARED);
    until_waiting(&lock, "job", 1).await;
    let r2 = waiter(&lock, "r2", SHARED);
    until_waiting(&lock, "job", 2).await;
    // A newcomer does not overtake the line, even as a holder leaves.
    assert_eq!(lock.release(&ask("a")).await.unwrap().holds, 0);
    let r1 = r1.await.unwrap().unwrap();
    let late = lock.try_acquire(&ask("c"), SHARED).await.unwrap();
    assert!(late.grant.is_none());
    assert!(!r2.is_finished());
    assert_eq!(lock.release(&ask("b")).await.unwrap().holds, 0);
    assert!(r2.await.unwrap().unwrap() > r1);
    let state = lock.state(b"job").await.unwrap().unwrap();
    assert_eq!(state.holders().len(), 2);
}

/// A key written by an older client, its mode in its name, is an error: never ignored,
/// which would grant beside its holder.
#[tokio::test]
async fn a_key_of_the_older_layout_is_an_error() {
    let etcd = Etcd::start();
    let lock = rw(&etcd).await;
    let mut client = Client::connect([etcd.endpoint()], None).await.unwrap();
    let lease = client.lease_grant(30, None).await.unwrap().id();
    let older = [&1u64.to_be_bytes()[..], b"dead"].concat();
    let options = PutOptions::new().with_lease(lease);
    client
        .put("t/job/rw/x/64656164", older, Some(options.clone()))
        .await
        .unwrap();
    let refused = lock.try_acquire(&ask("a"), SHARED).await.unwrap_err();
    assert!(matches!(refused, Error::Corrupt { .. }), "{refused}");
    assert!(lock.state(b"job").await.is_err());
    // A key of the new layout whose name is not its owner is one too.
    client
        .put("t/other/rw/6f", dead_writer(), Some(options))
        .await
        .unwrap();
    let other = ask("a");
    let other = sluicegate_core::LeaseRequest::new("other")
        .owner("a")
        .ttl(other.ttl);
    let mislabelled = lock.try_acquire(&other, SHARED).await.unwrap_err();
    assert!(matches!(mislabelled, Error::Corrupt { .. }));
}

/// A sole holder with a waiter behind it is not upgraded: the waiter's token is its
/// key's creation, which would be below the upgrade's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_with_a_waiter_behind_it_is_not_upgraded() {
    let etcd = Etcd::start();
    let lock = rw(&etcd).await;
    let a = granted(&lock, "a", SHARED).await;
    let w = waiter(&lock, "w", EXCLUSIVE);
    until_waiting(&lock, "job", 1).await;
    let refused = lock.try_acquire(&ask("a"), EXCLUSIVE).await.unwrap();
    assert!(refused.grant.is_none() && refused.place.is_none());
    let state = lock.state(b"job").await.unwrap().unwrap();
    assert_eq!(state.holders()[0].mode(), SHARED);
    assert_eq!(lock.release(&ask("a")).await.unwrap().holds, 0);
    assert!(w.await.unwrap().unwrap() > a.token);
}

/// A writer's release on a counted lock of two wakes the two readers it lets in and,
/// once the second is granted, the one behind it: not the whole line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writers_release_wakes_only_the_count_behind_it() {
    let etcd = Etcd::start();
    let counted = rw(&etcd).await.counted(Concurrency::new(2).unwrap());
    assert!(counted
        .try_acquire(&ask("w"), EXCLUSIVE)
        .await
        .unwrap()
        .grant
        .is_some());
    let lock = counted.clone().counted_apart();
    let owners = ["r0", "r1", "r2", "r3", "r4", "r5", "r6", "r7"];
    let mut readers = Vec::new();
    for (i, owner) in owners.into_iter().enumerate() {
        readers.push(waiter(&lock, owner, SHARED));
        until_waiting(&lock, "job", i + 1).await;
    }
    assert_eq!(lock.wakes(), 0);
    assert_eq!(lock.release(&ask("w")).await.unwrap().holds, 0);
    let mut line = readers.into_iter();
    for reader in line.by_ref().take(2) {
        assert!(reader.await.unwrap().is_some());
    }
    until_waiting(&lock, "job", 6).await;
    // r2's wake comes through a watch, after r1's grant: polled for, bounded.
    let granted = tokio::time::Instant::now();
    while lock.wakes() < 3 && granted.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    // r0 and r1 hear the writer's delete, r2 hears r1's grant; r3 to r7 nothing.
    assert_eq!(lock.wakes(), 3);
    for owner in ["r0", "r1"] {
        assert_eq!(lock.release(&ask(owner)).await.unwrap().holds, 0);
    }
    assert!(line.next().unwrap().await.unwrap().is_some());
}

/// A key still in line asked again in another mode keeps its place in that mode, as the
/// core's queue does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_place_asked_again_in_another_mode_keeps_its_number() {
    let etcd = Etcd::start();
    let lock = holding(&etcd, "w").await;
    let first = waiter(&lock, "r", SHARED);
    until_waiting(&lock, "job", 1).await;
    let state = lock.state(b"job").await.unwrap().unwrap();
    let place = state.waiters()[0].place();
    assert_eq!(state.waiters()[0].mode(), SHARED);
    // The same owner asks to write: its key is rewritten exclusive, in the same place.
    let again = {
        let lock = lock.clone();
        tokio::spawn(async move {
            let wait = Duration::from_millis(500);
            let asked = lock.acquire(&ask("r"), EXCLUSIVE, wait).await;
            asked.unwrap().grant.is_none()
        })
    };
    let mut seen = None;
    for _ in 0..200 {
        let state = lock.state(b"job").await.unwrap().unwrap();
        if state.waiters()[0].mode() == EXCLUSIVE {
            seen = Some(state.waiters()[0].place());
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(seen, Some(place));
    assert!(again.await.unwrap(), "refused at its deadline");
    first.abort();
}
