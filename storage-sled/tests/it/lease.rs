//! Leases over a real sled database, against the core's pure model.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::common::temp_tree;
use proptest::prelude::*;
use sluicegate_core::memory::FencedResource;
use sluicegate_core::{
    Acquired, Algorithm, Concurrency, Grant, LeaseError, LeaseRequest, LeaseState, ParamError,
    Ticks, TokenBucket, SECOND,
};
use sluicegate_sled::{Durability, Error, SledLeases};

/// A lock over a fresh tree, flushed on every decision.
fn temp_lock() -> (tempfile::TempDir, sled::Db, sled::Tree, SledLeases) {
    let (dir, db, tree) = temp_tree("leases");
    let lock = SledLeases::new(tree.clone(), Concurrency::lock(), Durability::EveryDecision);
    (dir, db, tree, lock)
}

/// The grant of an acquisition that must succeed.
fn must_grant(acquired: Result<Acquired, Error>) -> Grant {
    acquired.unwrap().grant.unwrap()
}

/// One call: (advance, owner index, operation 0 acquire / 1 release / 2 renew, ttl).
type Step = (Ticks, u8, u8, Ticks);

fn steps() -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec((0..40u64, 0..4u8, 0..3u8, 1..60u64), 1..120)
}

proptest! {
    /// The same calls through sled and through the bare model: the same results, and
    /// after every step the record is exactly the core's encoding (absent when fresh).
    #[test]
    fn leases_on_sled_are_the_core(max in 1..4u64, start in 0..1000u64, steps in steps()) {
        let (_dir, _db, tree) = temp_tree("leases");
        let model = Concurrency::new(max).unwrap();
        let sled = SledLeases::new(tree.clone(), model, Durability::Background).with_prefix("l/");
        let mut state = None;
        let mut now = start;
        for (advance, owner, op, ttl) in steps {
            now += advance;
            let owner = [b'o', b'0' + owner];
            match op {
                0 => {
                    let expected = model.acquire(state.clone(), now, &owner, ttl);
                    let got = sled.acquire(&LeaseRequest::new(b"k").owner(&owner).ttl(ttl).at(now));
                    let (answer, next) = expected.unwrap();
                    prop_assert_eq!(got.unwrap(), answer);
                    state = next;
                }
                1 => match model.release(state.clone(), now, &owner) {
                    Ok((grant, next)) => {
                        prop_assert_eq!(sled.release(&LeaseRequest::new(b"k").owner(&owner).at(now)).unwrap(), grant);
                        state = next;
                    }
                    Err(e) => prop_assert!(matches!(sled.release(&LeaseRequest::new(b"k").owner(&owner).at(now)), Err(Error::Lease(got)) if got == e)),
                },
                _ => match model.renew(state.clone(), now, &owner, ttl) {
                    Ok((grant, next)) => {
                        prop_assert_eq!(sled.renew(&LeaseRequest::new(b"k").owner(&owner).ttl(ttl).at(now)).unwrap(), grant);
                        state = next;
                    }
                    Err(e) => prop_assert!(matches!(sled.renew(&LeaseRequest::new(b"k").owner(&owner).ttl(ttl).at(now)), Err(Error::Lease(got)) if got == e)),
                },
            }
            // The record is the core's state, or once fresh that fresh state, kept.
            let kept = sled.state(b"k").unwrap();
            let stored = tree.get(b"l/k").unwrap().map(|b| b.to_vec());
            prop_assert_eq!(stored, kept.as_ref().map(|s| model.encode_to_vec(s)));
            let unfresh = |s: &Option<LeaseState>| s.clone().filter(|s| !s.is_fresh(now));
            prop_assert_eq!(unfresh(&kept), unfresh(&state));
        }
    }
}

/// 8 threads on one key at a frozen `now` (nothing expires): never more than `max` held,
/// and every acquire and release goes through despite the races.
#[test]
fn eight_threads_never_hold_more_than_max() {
    let (_dir, _db, tree) = temp_tree("leases");
    let max = 3;
    let leases = SledLeases::new(tree, Concurrency::new(max).unwrap(), Durability::Background);
    let in_flight = Arc::new(AtomicU64::new(0));
    let peak = Arc::new(AtomicU64::new(0));
    let granted = Arc::new(AtomicU64::new(0));
    let now = 1_700_000_000 * SECOND;
    let threads: Vec<_> = (0..8u8)
        .map(|t| {
            let (leases, in_flight, peak, granted) = (
                leases.clone(),
                in_flight.clone(),
                peak.clone(),
                granted.clone(),
            );
            std::thread::spawn(move || {
                let owner = [b't', t];
                for _ in 0..300 {
                    let acquired = leases
                        .acquire(
                            &LeaseRequest::new(b"k")
                                .owner(&owner)
                                .ttl(60 * SECOND)
                                .at(now),
                        )
                        .unwrap();
                    if acquired.grant.is_some() {
                        let held = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                        peak.fetch_max(held, Ordering::SeqCst);
                        granted.fetch_add(1, Ordering::SeqCst);
                        std::thread::yield_now();
                        in_flight.fetch_sub(1, Ordering::SeqCst);
                        assert_eq!(
                            leases
                                .release(&LeaseRequest::new(b"k").owner(&owner).at(now))
                                .unwrap()
                                .holds,
                            0
                        );
                    }
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    assert!(peak.load(Ordering::SeqCst) <= max);
    assert!(granted.load(Ordering::SeqCst) > 0);
    // Every grant took a new token: the last token counts them (tokens start at `now`).
    let state = leases.state(b"k").unwrap().unwrap();
    assert!(state.leases().is_empty());
    assert_eq!(state.last_token(), now + granted.load(Ordering::SeqCst) - 1);
}

/// 32 threads take one lock through sled on the real clock, each around a read and a
/// later write of a shared counter that checks fencing tokens: every increment lands
/// (no two holders ever overlapped, or one's write would be lost or refused) and no
/// write is refused as stale (no holder outlived its lease: the ttl is far above the
/// critical section).
#[test]
fn a_lock_on_sled_serializes_32_threads_checked_by_fencing() {
    const THREADS: u64 = 32;
    const ROUNDS: u64 = 100;
    let (_dir, _db, tree) = temp_tree("leases");
    let lock = SledLeases::new(tree, Concurrency::lock(), Durability::Background);
    let counter = Arc::new(FencedResource::new(0u64));
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let (lock, counter) = (lock.clone(), counter.clone());
            std::thread::spawn(move || {
                let owner = format!("thread-{t}");
                for _ in 0..ROUNDS {
                    let grant = loop {
                        match lock
                            .acquire(
                                &LeaseRequest::new(b"k")
                                    .owner(owner.as_bytes())
                                    .ttl(5 * SECOND),
                            )
                            .unwrap()
                            .grant
                        {
                            Some(grant) => break grant,
                            None => std::thread::sleep(Duration::from_micros(100)),
                        }
                    };
                    // A read, a pause, and a write: another holder in between would
                    // make one of the two writes lost or refused.
                    let seen = counter.write(grant.token, |v| *v).unwrap();
                    std::thread::yield_now();
                    counter
                        .write(grant.token, |v| *v = seen + 1)
                        .expect("a lease holder's write is refused as stale");
                    assert_eq!(
                        lock.release(&LeaseRequest::new(b"k").owner(owner.as_bytes()))
                            .unwrap()
                            .holds,
                        0
                    );
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    assert_eq!(counter.read(|v| *v), THREADS * ROUNDS);
    assert_eq!(counter.refused(), 0);
}

/// Bad input, a lease not held, and another algorithm's state under the key are typed
/// errors, and the record is unchanged.
#[test]
fn bad_calls_are_typed_errors_that_change_nothing() {
    let (_dir, _db, tree, leases) = temp_lock();
    let grant = must_grant(leases.acquire(&LeaseRequest::new(b"k").owner(b"a").ttl(50).at(100)));
    assert_eq!(grant.token, 100);
    let before = tree.get(b"k").unwrap().unwrap();
    let at110 = LeaseRequest::new(b"k").at(110);
    let param = |e: Result<_, Error>, name: &str| matches!(e, Err(Error::Lease(LeaseError::Param(ParamError::OutOfRange { name: n, .. }))) if n == name);
    assert!(param(
        leases.acquire(&at110.owner(b"").ttl(50)).map(drop),
        "owner length"
    ));
    assert!(param(
        leases.acquire(&at110.owner(&[b'x'; 129]).ttl(50)).map(drop),
        "owner length"
    ));
    assert!(param(
        leases.acquire(&at110.owner(b"b").ttl(0)).map(drop),
        "ttl"
    ));
    assert!(param(
        leases.renew(&at110.owner(b"a").ttl(0)).map(drop),
        "ttl"
    ));
    assert!(matches!(
        leases.release(&at110.owner(b"b")),
        Err(Error::Lease(LeaseError::NotHeld))
    ));
    assert!(matches!(
        leases.renew(&at110.owner(b"b").ttl(50)),
        Err(Error::Lease(LeaseError::NotHeld))
    ));
    assert!(matches!(
        leases.acquire(&LeaseRequest::new(b"k").owner(b"a").ttl(50).at(u64::MAX)),
        Err(Error::Time(_))
    ));
    assert_eq!(tree.get(b"k").unwrap().unwrap(), before);
    // Another algorithm's state, and an application's value, are refused by name.
    let bucket = TokenBucket::new(3, 1, SECOND).unwrap();
    let other = bucket.encode_to_vec(&bucket.decide(None, 0, 1).1.unwrap());
    tree.insert(b"bucket", other.clone()).unwrap();
    tree.insert(b"app", b"user=alice".as_slice()).unwrap();
    for (key, why) in [
        (
            b"bucket".as_slice(),
            "state is a token bucket's, expected a lease table's",
        ),
        (b"app", "state encoding version 117 is not supported"),
    ] {
        for result in [
            leases
                .acquire(&LeaseRequest::new(key).owner(b"a").ttl(50).at(110))
                .map(drop),
            leases
                .release(&LeaseRequest::new(key).owner(b"a").at(110))
                .map(drop),
            leases
                .renew(&LeaseRequest::new(key).owner(b"a").ttl(50).at(110))
                .map(drop),
            leases.state(key).map(drop),
        ] {
            let message = result.unwrap_err().to_string();
            assert!(message.contains(why), "{message}");
        }
    }
    assert_eq!(
        tree.get(b"bucket").unwrap().unwrap().as_ref(),
        other.as_slice()
    );
    assert_eq!(tree.get(b"app").unwrap().unwrap().as_ref(), b"user=alice");
}

/// Releasing the last hold leaves the record fresh, kept as its last token; a later grant
/// gets a larger token; an expired lease is
/// reclaimed by the next call.
#[test]
fn fresh_tables_are_kept_and_tokens_still_grow() {
    let (_dir, _db, _tree, lock) = temp_lock();
    let first = must_grant(lock.acquire(&LeaseRequest::new(b"k").owner(b"a").ttl(10).at(1000)));
    assert_eq!(
        must_grant(lock.acquire(&LeaseRequest::new(b"k").owner(b"a").ttl(10).at(1001))).holds,
        2
    );
    assert_eq!(
        lock.release(&LeaseRequest::new(b"k").owner(b"a").at(1002))
            .unwrap()
            .holds,
        1
    );
    assert_eq!(
        lock.release(&LeaseRequest::new(b"k").owner(b"a").at(1003))
            .unwrap()
            .holds,
        0
    );
    let kept = lock.state(b"k").unwrap().unwrap();
    assert!(kept.is_fresh(1003) && kept.last_token() == first.token);
    let second = must_grant(lock.acquire(&LeaseRequest::new(b"k").owner(b"b").ttl(10).at(1004)));
    assert!(second.token > first.token);
    // b crashes: its lease is free again at its expiry, not before.
    let denied = lock
        .acquire(&LeaseRequest::new(b"k").owner(b"c").ttl(10).at(1013))
        .unwrap();
    assert!(denied.grant.is_none());
    assert_eq!(denied.decision.retry_after, Some(1));
    let third = must_grant(lock.acquire(&LeaseRequest::new(b"k").owner(b"c").ttl(10).at(1014)));
    assert!(third.token > second.token);
    assert!(matches!(
        lock.release(&LeaseRequest::new(b"k").owner(b"b").at(1015)),
        Err(Error::Lease(LeaseError::NotHeld))
    ));
}
