//! In-process leases: mutual exclusion checked by a fenced resource under real threads,
//! the concurrency bound, expiry of forgotten guards, waiters woken by release (not by
//! polling), deadlines, reentrancy and bounded keyed memory.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Barrier;

use crate::common::{assert_prompt_wakes, assert_refusals_do_not_sweep, OneShard, LATE, LONG};
use proptest::prelude::*;
use std::time::{Duration, Instant};

use sluicegate_core::memory::{AcquireError, FencedResource, KeyedLeases, Leases};
use sluicegate_core::{
    Clock, Concurrency, LeaseError, LeaseState, ManualClock, ParamError, MILLISECOND, SECOND,
};

const THREADS: usize = 32;
const ROUNDS: usize = 200;

/// `THREADS` threads each take the lock `ROUNDS` times around a read-modify-write of
/// a fenced value: the final value is exact and no write is refused.
fn read_modify_write<'a>(take: impl Fn() -> (u64, Box<dyn FnOnce() + 'a>) + Sync) {
    let resource = FencedResource::new(0usize);
    std::thread::scope(|s| {
        for _ in 0..THREADS {
            s.spawn(|| {
                for _ in 0..ROUNDS {
                    let (token, release) = take();
                    let seen = resource.read(|v| *v);
                    std::thread::yield_now();
                    resource.write(token, |v| *v = seen + 1).unwrap();
                    release();
                }
            });
        }
    });
    assert_eq!(resource.read(|v| *v), THREADS * ROUNDS);
    assert_eq!(resource.refused(), 0);
}

#[test]
fn thirty_two_threads_take_a_lock_around_a_read_modify_write() {
    let lock = Leases::new(Concurrency::lock());
    read_modify_write(|| {
        let guard = lock.acquire(None, LONG, Duration::from_secs(30)).unwrap();
        (guard.token(), Box::new(move || drop(guard)))
    });
    let keyed = KeyedLeases::new(Concurrency::lock(), 100);
    read_modify_write(|| {
        let guard = keyed
            .acquire("account:7", None, LONG, Duration::from_secs(30))
            .unwrap();
        (
            guard.token(),
            Box::new(move || guard.release().map(drop).unwrap()),
        )
    });
}

/// `THREADS` threads each enter `ROUNDS` times, counting who is inside on every entry.
fn never_more_than_three<'a>(enter: impl Fn() -> Box<dyn FnOnce() + 'a> + Sync) {
    let inside = AtomicUsize::new(0);
    let most = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..THREADS {
            s.spawn(|| {
                for _ in 0..ROUNDS {
                    let leave = enter();
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    assert!(now <= 3, "{now} inside");
                    most.fetch_max(now, Ordering::SeqCst);
                    std::thread::yield_now();
                    inside.fetch_sub(1, Ordering::SeqCst);
                    leave();
                }
            });
        }
    });
    assert_eq!(most.into_inner(), 3);
}

#[test]
fn a_limit_of_three_never_has_more_than_three_inside() {
    let leases = Leases::new(Concurrency::new(3).unwrap());
    never_more_than_three(|| {
        let guard = leases.acquire(None, LONG, Duration::from_secs(30)).unwrap();
        Box::new(move || drop(guard))
    });
    let keyed = KeyedLeases::new(Concurrency::new(3).unwrap(), 10);
    never_more_than_three(|| {
        let guard = keyed
            .acquire(&1u32, None, LONG, Duration::from_secs(30))
            .unwrap();
        Box::new(move || drop(guard))
    });
}

#[test]
fn a_forgotten_guard_returns_its_lease_after_ttl_and_not_before() {
    let leases = Leases::with_clock(Concurrency::new(2).unwrap(), ManualClock::new(SECOND));
    let crashed = leases.try_acquire(None, 100).unwrap();
    let first = crashed.token();
    // The in-process crash: the guard is never dropped.
    std::mem::forget(crashed);
    let other = leases.try_acquire(None, 1_000).unwrap();
    leases.clock().advance(99);
    let Err(AcquireError::Busy(denied)) = leases.try_acquire(None, 100) else {
        panic!("granted a third lease before the forgotten one expired");
    };
    assert_eq!(denied.retry_after, Some(1));
    leases.clock().advance(1);
    let next = leases.try_acquire(None, 100).unwrap();
    assert!(next.token() > other.token() && other.token() > first);

    // The same per key; the key is kept while its lease lives.
    let keyed = KeyedLeases::with_clock(Concurrency::lock(), 10, ManualClock::new(SECOND));
    std::mem::forget(keyed.try_acquire("job", None, 100).unwrap());
    keyed.clock().advance(99);
    assert!(keyed.try_acquire("job", None, 100).is_err());
    assert_eq!(keyed.sweep(), 0);
    keyed.clock().advance(1);
    assert!(keyed.try_acquire("job", None, 100).is_ok());
}

#[test]
fn a_guard_releases_only_its_own_lease() {
    let lock = Leases::with_clock(Concurrency::lock(), ManualClock::new(SECOND));
    let clock = lock.clock();
    let mut stale = lock.try_acquire(Some(b"worker-1"), 100).unwrap();
    clock.advance(100);
    // Same owner, after the first lease expired: a new lease with a new token.
    let fresh = lock.try_acquire(Some(b"worker-1"), 100).unwrap();
    assert!(fresh.token() > stale.token());
    assert_eq!(stale.renew(100), Err(LeaseError::NotHeld));
    assert_eq!(stale.release(), Err(LeaseError::NotHeld));
    // Nor does dropping a stale guard free the new lease.
    let stale = lock.try_acquire(Some(b"worker-1"), 100).unwrap();
    assert_eq!(stale.token(), fresh.token(), "re-entered");
    drop(stale);
    assert!(lock.try_acquire(Some(b"worker-2"), 100).is_err());
    drop(fresh);
    assert!(lock.try_acquire(Some(b"worker-2"), 100).is_ok());
}

#[test]
fn an_owner_re_enters_and_renews_its_lease() {
    let lock = Leases::with_clock(Concurrency::lock(), ManualClock::new(SECOND));
    let clock = lock.clock();
    let outer = lock.try_acquire(Some(b"task-9"), 100).unwrap();
    let mut inner = lock.try_acquire(Some(b"task-9"), 100).unwrap();
    assert_eq!((inner.token(), inner.grant().holds), (outer.token(), 2));
    clock.advance(90);
    inner.renew(100).unwrap();
    assert_eq!(inner.expires_at(), SECOND + 190);
    clock.advance(50);
    assert_eq!(inner.release(), Ok(1));
    assert!(lock.try_acquire(None, 100).is_err(), "held once more");
    assert_eq!(outer.release(), Ok(0));
    assert!(lock.try_acquire(None, 100).is_ok());
}

#[test]
fn bad_input_is_a_typed_error() {
    let leases = Leases::new(Concurrency::lock());
    let owner_err = |len| {
        Err(AcquireError::Lease(LeaseError::Param(
            ParamError::OutOfRange {
                name: "owner length",
                value: len,
                min: 1,
                max: 128,
            },
        )))
    };
    assert_eq!(leases.try_acquire(Some(b""), 10).map(drop), owner_err(0));
    assert_eq!(
        leases.try_acquire(Some(&[b'x'; 129]), 10).map(drop),
        owner_err(129)
    );
    for ttl in [0, u64::MAX] {
        assert!(matches!(
            leases.try_acquire(None, ttl),
            Err(AcquireError::Lease(LeaseError::Param(
                ParamError::OutOfRange { name: "ttl", .. }
            )))
        ));
    }
    // Nothing was taken.
    assert!(leases.try_acquire(None, 10).is_ok());
}

#[test]
fn release_wakes_a_waiter_at_once() {
    let lock = Leases::new(Concurrency::lock());
    let ready = Barrier::new(2);
    let latencies: Vec<Duration> = (0..20)
        .map(|_| {
            let guard = lock.try_acquire(None, LONG).unwrap();
            std::thread::scope(|s| {
                let waiter = s.spawn(|| {
                    ready.wait();
                    let guard = lock.acquire(None, LONG, Duration::from_secs(10)).unwrap();
                    (Instant::now(), guard.token())
                });
                ready.wait();
                // Let the waiter go to sleep; it has ten seconds and the lease a minute,
                // so only the release can wake it.
                std::thread::sleep(Duration::from_millis(20));
                let released = Instant::now();
                drop(guard);
                let (woke, _) = waiter.join().unwrap();
                woke - released
            })
        })
        .collect();
    assert_prompt_wakes("thread", latencies);
}

#[test]
fn a_waiter_wakes_when_a_forgotten_lease_expires() {
    let lock = KeyedLeases::new(Concurrency::lock(), 10);
    let start = Instant::now();
    std::mem::forget(lock.try_acquire("cron", None, 100 * MILLISECOND).unwrap());
    let guard = lock
        .acquire("cron", None, LONG, Duration::from_secs(5))
        .unwrap();
    let waited = start.elapsed();
    assert!(waited >= Duration::from_millis(100), "{waited:?}");
    assert!(waited < Duration::from_millis(100) + LATE, "{waited:?}");
    assert!(guard.token() > 0);
}

#[test]
fn a_waiter_gives_up_at_its_deadline() {
    let lock = Leases::new(Concurrency::lock());
    let _held = lock.try_acquire(None, LONG).unwrap();
    let start = Instant::now();
    let Err(AcquireError::Busy(denied)) = lock.acquire(None, LONG, Duration::from_millis(50))
    else {
        panic!("granted while held");
    };
    let waited = start.elapsed();
    assert!(waited >= Duration::from_millis(50), "{waited:?}");
    assert!(waited < Duration::from_millis(50) + LATE, "{waited:?}");
    assert!(denied.retry_after.unwrap() > 50 * SECOND);
    // A zero timeout tries once.
    let start = Instant::now();
    assert!(lock.acquire(None, LONG, Duration::ZERO).is_err());
    assert!(start.elapsed() < LATE);
}

#[test]
fn keyed_memory_is_bounded_and_never_evicts_a_key_in_use() {
    let leases = KeyedLeases::with_clock(Concurrency::lock(), 1, ManualClock::new(SECOND));
    let clock = leases.clock();
    let held = leases.try_acquire(&1u32, None, 100).unwrap();
    let first = held.token();
    // Full of a key in use: a new key waits until that one is fresh.
    let Err(AcquireError::Busy(denied)) = leases.try_acquire(&2u32, None, 100) else {
        panic!("a second key in a table of one");
    };
    assert_eq!(denied.retry_after, Some(100));
    assert_eq!(leases.len(), 1);
    // Released at the tick its token was granted: kept until the clock passes the
    // token, then dropped; a later grant on the same key gets a larger token.
    drop(held);
    assert_eq!(leases.len(), 1);
    clock.advance(1);
    let other = leases.try_acquire(&2u32, None, 100).unwrap();
    assert_eq!(leases.len(), 1);
    drop(other);
    clock.advance(1);
    assert_eq!(leases.sweep(), 1);
    assert!(leases.is_empty());
    assert!(leases.try_acquire(&1u32, None, 100).unwrap().token() > first);
}

/// A table filled with long leases (one app taking every key) refuses a new key after
/// one sweep, then answers each refusal without another until the earliest lease could
/// expire: a refusal costs about what a grant does, not a scan of the table. A release
/// brings that instant forward; an expiry admits a new key.
#[test]
fn a_full_lease_table_refuses_without_sweeping_until_a_lease_can_end() {
    let leases = KeyedLeases::with_hasher(
        Concurrency::lock(),
        1 << 19,
        ManualClock::new(SECOND),
        OneShard,
    );
    assert_eq!(leases.capacity(), 1 << 19);
    let clock = leases.clock();
    // Fill the one shard every key goes to, key k held for `LONG + k`.
    let started = Instant::now();
    let mut key = 0u64;
    while leases.acquire_by(&key, b"app", LONG + key).is_ok() {
        key += 1;
    }
    let per_grant = started.elapsed() / u32::try_from(key).unwrap();
    let held = key;
    assert_eq!(leases.len() as u64, held);
    assert_eq!(leases.refused(), 1);
    // A thousand new keys refused: each told when key 0 could end, none sweeping.
    assert_refusals_do_not_sweep(held, per_grant, |i| {
        let Err(AcquireError::Busy(denied)) = leases.acquire_by(&(held + i), b"app", LONG) else {
            panic!("a new key in a full table");
        };
        assert_eq!(denied.retry_after, Some(LONG));
    });
    assert_eq!(leases.refused(), 1001);
    // Released at the tick it was granted, the last key is fresh one tick later.
    let last = held - 1;
    assert_eq!(leases.release_by(&last, b"app").unwrap().holds, 0);
    let Err(AcquireError::Busy(denied)) = leases.acquire_by(&held, b"app", LONG) else {
        panic!("a new key before the released one is fresh");
    };
    assert_eq!(denied.retry_after, Some(1));
    clock.advance(1);
    assert!(leases.acquire_by(&held, b"app", LONG).is_ok());
    // Full again: key 0's lease expires at `LONG` after the fill, and a new key takes
    // its place.
    assert!(leases.acquire_by(&(held + 1), b"app", LONG).is_err());
    clock.advance(LONG - 1);
    assert!(leases.acquire_by(&(held + 1), b"app", LONG).is_ok());
    assert_eq!(leases.len() as u64, held);
    assert_eq!(leases.refused(), 1003);
}

#[test]
fn keys_are_independent() {
    let leases = KeyedLeases::new(Concurrency::lock(), 1000);
    let a = leases.try_acquire("a", None, LONG).unwrap();
    let b = leases.try_acquire("b", None, LONG).unwrap();
    assert!(leases.try_acquire("a", None, LONG).is_err());
    assert_eq!((a.key().as_str(), b.key().as_str()), ("a", "b"));
    assert_eq!(leases.state("a").unwrap().leases().len(), 1);
    drop(a);
    assert!(leases.try_acquire("a", None, LONG).is_ok());
}

/// Readings handed out in a given order: two threads that read the clock in one order
/// and lock the table in the other look like this to the table.
#[derive(Debug)]
struct Readings(std::sync::Mutex<Vec<u64>>);

impl sluicegate_core::Clock for Readings {
    fn now(&self) -> u64 {
        self.0.lock().unwrap().pop().unwrap()
    }
}

#[test]
fn a_late_clock_reading_never_repeats_a_token_after_the_key_was_dropped() {
    // Granted at 1000, the key dropped by a sweep at 1001, then a grant with a reading
    // of 999 taken before either: the table uses 1001, not 999, so the token grows.
    let readings = Readings(std::sync::Mutex::new(vec![999, 1001, 1000]));
    let leases = KeyedLeases::with_clock(Concurrency::lock(), 10, readings);
    let first = leases.try_acquire("k", None, 1).unwrap();
    let token = first.token();
    assert_eq!(token, 1000);
    drop(first);
    assert_eq!(leases.sweep(), 1);
    let next = leases.try_acquire("k", None, 1).unwrap();
    assert!(next.token() > token, "{} after {token}", next.token());
}

#[test]
fn a_holder_paused_past_its_expiry_has_its_write_refused() {
    // Kleppmann's scenario in one process: the holder stops (a GC pause) past its
    // lease's expiry, another takes the lock and writes, the first resumes and writes.
    let lock = Leases::new(Concurrency::lock());
    let ledger = FencedResource::new(Vec::new());
    let paused = lock.try_acquire(None, 50 * MILLISECOND).unwrap();
    std::thread::sleep(Duration::from_millis(60));
    let next = lock.try_acquire(None, LONG).unwrap();
    ledger.write(next.token(), |l| l.push("next")).unwrap();
    let refused = ledger.write(paused.token(), |l| l.push("paused"));
    assert_eq!(refused.unwrap_err().highest, next.token());
    assert_eq!(paused.release(), Err(LeaseError::NotHeld));
    assert_eq!(ledger.read(|l| l.clone()), ["next"]);
}

#[derive(Debug, Clone)]
enum Op {
    Acquire { key: u8, owner: u8, ttl: u64 },
    Release { guard: usize },
    Renew { guard: usize, ttl: u64 },
    Advance { by: u64 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u8..3, 0u8..4, 1u64..200).prop_map(|(key, owner, ttl)| Op::Acquire { key, owner, ttl }),
        2 => (0usize..8).prop_map(|guard| Op::Release { guard }),
        1 => (0usize..8, 1u64..200).prop_map(|(guard, ttl)| Op::Renew { guard, ttl }),
        2 => (0u64..150).prop_map(|by| Op::Advance { by }),
    ]
}

proptest! {
    /// Keyed leases on a manual clock answer as the core's transitions on a state per
    /// key, guard by guard, and hold the core's state (or a fresh one not yet swept).
    #[test]
    fn keyed_leases_decide_as_the_core(ops in prop::collection::vec(op(), 1..80)) {
        let concurrency = Concurrency::new(2).unwrap();
        let leases = KeyedLeases::with_clock(concurrency, 100, ManualClock::new(1_000));
        let mut model: [Option<LeaseState>; 3] = Default::default();
        let mut guards = Vec::new();
        for op in ops {
            let now = leases.clock().now();
            match op {
                Op::Acquire { key, owner, ttl } => {
                    let k = usize::from(key);
                    let (want, next) = concurrency.acquire(model[k].take(), now, &[owner], ttl).unwrap();
                    model[k] = next;
                    match (leases.try_acquire(&key, Some(&[owner]), ttl), want.grant) {
                        (Ok(guard), Some(grant)) => {
                            prop_assert_eq!(guard.grant(), grant);
                            guards.push(guard);
                        }
                        (Err(AcquireError::Busy(got)), None) => prop_assert_eq!(got, want.decision),
                        (got, want) => prop_assert!(false, "host {:?}, core {:?}", got.map(|g| g.grant()), want),
                    }
                }
                Op::Release { guard } if guard < guards.len() => {
                    let guard = guards.swap_remove(guard);
                    let k = usize::from(*guard.key());
                    let owner = guard.owner().to_vec();
                    let mine = model[k].as_ref().and_then(|s| s.held(&owner, now)).map(|l| l.token());
                    let want = if mine == Some(guard.token()) {
                        let (grant, next) = concurrency.release(model[k].take(), now, &owner).unwrap();
                        model[k] = next;
                        Ok(grant.holds)
                    } else {
                        Err(LeaseError::NotHeld)
                    };
                    prop_assert_eq!(guard.release(), want);
                }
                Op::Renew { guard, ttl } if guard < guards.len() => {
                    let guard = &mut guards[guard];
                    let k = usize::from(*guard.key());
                    let owner = guard.owner().to_vec();
                    let mine = model[k].as_ref().and_then(|s| s.held(&owner, now)).map(|l| l.token());
                    let want = if mine == Some(guard.token()) {
                        let (grant, next) = concurrency.renew(model[k].take(), now, &owner, ttl).unwrap();
                        model[k] = next;
                        Ok(grant.expires_at)
                    } else {
                        Err(LeaseError::NotHeld)
                    };
                    prop_assert_eq!(guard.renew(ttl).map(|()| guard.expires_at()), want);
                }
                Op::Advance { by } => leases.clock().advance(by),
                _ => {}
            }
            for key in 0..3u8 {
                let held = leases.state(&key);
                // A fresh state may be kept or dropped; any other is the core's.
                match model[usize::from(key)].as_ref().filter(|s| !s.is_fresh(now)) {
                    Some(state) => prop_assert_eq!(held.as_ref(), Some(state)),
                    None => prop_assert!(held.is_none_or(|s| s.is_fresh(now))),
                }
            }
        }
        // Guards still alive release on drop: everything is free again.
        drop(guards);
        leases.clock().advance(1_000);
        leases.sweep();
        prop_assert!(leases.is_empty());
    }
}

#[derive(Debug, Clone)]
enum TableOp {
    /// `None`: the host's own owner; else one of three given owners.
    Acquire {
        owner: Option<u8>,
        ttl: u64,
    },
    /// Acquires as a live guard's owner (re-entering its lease, the host's own
    /// owners named by a caller too).
    AsOwnerOf {
        guard: usize,
        ttl: u64,
    },
    Release {
        guard: usize,
    },
    Drop {
        guard: usize,
    },
    /// The in-process crash: the guard is never dropped.
    Forget {
        guard: usize,
    },
    Renew {
        guard: usize,
        ttl: u64,
    },
    Advance {
        by: u64,
    },
}

fn table_op() -> impl Strategy<Value = TableOp> {
    prop_oneof![
        4 => (prop::option::of(0u8..3), 1u64..200).prop_map(|(owner, ttl)| TableOp::Acquire { owner, ttl }),
        1 => (0usize..8, 1u64..200).prop_map(|(guard, ttl)| TableOp::AsOwnerOf { guard, ttl }),
        2 => (0usize..8).prop_map(|guard| TableOp::Release { guard }),
        2 => (0usize..8).prop_map(|guard| TableOp::Drop { guard }),
        1 => (0usize..8).prop_map(|guard| TableOp::Forget { guard }),
        1 => (0usize..8, 1u64..200).prop_map(|(guard, ttl)| TableOp::Renew { guard, ttl }),
        2 => (0u64..150).prop_map(|by| TableOp::Advance { by }),
    ]
}

/// The core's answer to `owner` acquiring on `model` at `now`, against the table's.
fn same_acquire(
    concurrency: Concurrency,
    model: &mut Option<LeaseState>,
    now: u64,
    owner: &[u8],
    ttl: u64,
    got: Result<sluicegate_core::Grant, AcquireError>,
) -> Result<(), TestCaseError> {
    let (want, next) = concurrency.acquire(model.take(), now, owner, ttl).unwrap();
    *model = next;
    match (got, want.grant) {
        (Ok(got), Some(want)) => prop_assert_eq!(got, want),
        (Err(AcquireError::Busy(got)), None) => prop_assert_eq!(got, want.decision),
        (got, want) => prop_assert!(false, "table {:?}, core {:?}", got, want),
    }
    Ok(())
}

/// `guard`'s lease as the core sees it: held by its owner with its token at `now`.
fn core_holds(model: &Option<LeaseState>, now: u64, owner: &[u8], token: u64) -> bool {
    model
        .as_ref()
        .and_then(|s| s.held(owner, now))
        .is_some_and(|l| l.token() == token)
}

proptest! {
    /// The lock-free table on a manual clock answers as the core's transitions on one
    /// state, guard by guard (grants, tokens, expiries, denials and their
    /// `retry_after`), and its state is the core's leases unexpired now.
    #[test]
    fn leases_decide_as_the_core(ops in prop::collection::vec(table_op(), 1..100)) {
        let concurrency = Concurrency::new(3).unwrap();
        let leases = Leases::with_clock(concurrency, ManualClock::new(1_000));
        let mut model: Option<LeaseState> = None;
        let mut guards = Vec::new();
        for op in ops {
            let now = leases.clock().now();
            match op {
                TableOp::Acquire { owner: Some(owner), ttl } => {
                    let got = leases.try_acquire(Some(&[owner]), ttl);
                    let grant = got.as_ref().map(|g| g.grant()).map_err(Clone::clone);
                    same_acquire(concurrency, &mut model, now, &[owner], ttl, grant)?;
                    guards.extend(got);
                }
                TableOp::Acquire { owner: None, ttl } => {
                    let got = leases.try_acquire(None, ttl);
                    // Denied, any owner without a lease is denied alike.
                    let owner = got.as_ref().map_or(b"nobody".to_vec(), |g| g.owner().to_vec());
                    let grant = got.as_ref().map(|g| g.grant()).map_err(Clone::clone);
                    same_acquire(concurrency, &mut model, now, &owner, ttl, grant)?;
                    guards.extend(got);
                }
                TableOp::AsOwnerOf { guard, ttl } if guard < guards.len() => {
                    let owner = guards[guard].owner().to_vec();
                    let got = leases.try_acquire(Some(&owner), ttl);
                    let grant = got.as_ref().map(|g| g.grant()).map_err(Clone::clone);
                    same_acquire(concurrency, &mut model, now, &owner, ttl, grant)?;
                    guards.extend(got);
                }
                TableOp::Release { guard } if guard < guards.len() => {
                    let guard = guards.swap_remove(guard);
                    let owner = guard.owner().to_vec();
                    let want = if core_holds(&model, now, &owner, guard.token()) {
                        let (grant, next) = concurrency.release(model.take(), now, &owner).unwrap();
                        model = next;
                        Ok(grant.holds)
                    } else {
                        Err(LeaseError::NotHeld)
                    };
                    prop_assert_eq!(guard.release(), want);
                }
                TableOp::Drop { guard } if guard < guards.len() => {
                    let guard = guards.swap_remove(guard);
                    // A lease still held is released; one expired is gone either way.
                    if core_holds(&model, now, guard.owner(), guard.token()) {
                        model = concurrency.release(model.take(), now, guard.owner()).unwrap().1;
                    }
                    drop(guard);
                }
                TableOp::Forget { guard } if guard < guards.len() => {
                    std::mem::forget(guards.swap_remove(guard));
                }
                TableOp::Renew { guard, ttl } if guard < guards.len() => {
                    let guard = &mut guards[guard];
                    let owner = guard.owner().to_vec();
                    let want = if core_holds(&model, now, &owner, guard.token()) {
                        let (grant, next) = concurrency.renew(model.take(), now, &owner, ttl).unwrap();
                        model = next;
                        Ok(grant)
                    } else {
                        Err(LeaseError::NotHeld)
                    };
                    prop_assert_eq!(guard.renew(ttl).map(|()| guard.grant()), want);
                }
                TableOp::Advance { by } => leases.clock().advance(by),
                _ => {}
            }
            let now = leases.clock().now();
            let state = leases.state();
            let live: Vec<_> = model
                .iter()
                .flat_map(|s| s.leases())
                .filter(|l| l.expires_at() > now)
                .collect();
            prop_assert_eq!(state.leases().iter().collect::<Vec<_>>(), live);
            // The core forgets a fresh state (its last token then below the clock).
            if let Some(model) = &model {
                prop_assert_eq!(state.last_token(), model.last_token());
            }
            let bytes = concurrency.encode_to_vec(&state);
            prop_assert_eq!(concurrency.decode(&bytes), Ok(state));
        }
    }
}

#[test]
fn tokens_grow_on_every_thread_and_never_repeat() {
    let leases = Leases::new(Concurrency::new(2).unwrap());
    let tokens: Vec<Vec<u64>> = std::thread::scope(|s| {
        let threads: Vec<_> = (0..8)
            .map(|_| {
                s.spawn(|| {
                    let mut mine = Vec::new();
                    while mine.len() < 2_000 {
                        if let Ok(guard) = leases.try_acquire(None, LONG) {
                            mine.push(guard.token());
                        }
                    }
                    mine
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    for mine in &tokens {
        assert!(mine.windows(2).all(|w| w[0] < w[1]), "a token went back");
    }
    let mut all: Vec<u64> = tokens.concat();
    all.sort_unstable();
    let granted = all.len();
    all.dedup();
    assert_eq!(all.len(), granted, "a token was granted twice");
    assert!(leases.state().leases().is_empty());
}

/// Leases held by an owner across calls (a service's callers): acquired, re-entered,
/// renewed and released by key and owner, with the state there to inspect, and "not
/// held" for an owner holding nothing unexpired.
#[test]
fn keyed_leases_by_owner() {
    let clock = ManualClock::new(SECOND);
    let leases = KeyedLeases::with_clock(Concurrency::new(2).unwrap(), 10, clock);
    let first = leases.acquire_by("door", b"alice", SECOND).unwrap();
    assert_eq!((first.holds, first.expires_at), (1, 2 * SECOND));
    let again = leases.acquire_by("door", b"alice", 3 * SECOND).unwrap();
    assert_eq!(
        (again.token, again.holds, again.expires_at),
        (first.token, 2, 4 * SECOND)
    );
    let bob = leases.acquire_by("door", b"bob", SECOND).unwrap();
    assert!(bob.token > first.token);
    assert!(matches!(
        leases.acquire_by("door", b"carol", SECOND),
        Err(AcquireError::Busy(d)) if d.retry_after == Some(SECOND)
    ));
    let state = leases.state("door").unwrap();
    let owners: Vec<&[u8]> = state.leases().iter().map(|l| l.owner()).collect();
    assert_eq!(owners, [&b"alice"[..], &b"bob"[..]]);

    leases.clock().advance(SECOND / 2);
    let renewed = leases.renew_by("door", b"bob", SECOND).unwrap();
    assert_eq!(
        (renewed.token, renewed.expires_at),
        (bob.token, 2 * SECOND + SECOND / 2)
    );
    assert_eq!(leases.release_by("door", b"alice").unwrap().holds, 1);
    assert_eq!(leases.release_by("door", b"alice").unwrap().holds, 0);
    assert_eq!(
        leases.release_by("door", b"alice"),
        Err(LeaseError::NotHeld)
    );
    assert_eq!(
        leases.renew_by("door", b"alice", SECOND),
        Err(LeaseError::NotHeld)
    );
    assert_eq!(
        leases.release_by("window", b"alice"),
        Err(LeaseError::NotHeld)
    );

    // Bob's lease expires: nothing is held.
    leases.clock().advance(2 * SECOND);
    assert_eq!(
        leases.renew_by("door", b"bob", SECOND),
        Err(LeaseError::NotHeld)
    );
    assert_eq!(leases.release_by("door", b"bob"), Err(LeaseError::NotHeld));
    let late = leases.acquire_by("door", b"carol", SECOND).unwrap();
    assert!(late.token > bob.token);
    assert_eq!(leases.release_by("door", b"carol").unwrap().holds, 0);
    // Fresh once the clock passes its last token (a later grant still gets a larger one).
    leases.clock().set(late.token + 1);
    assert_eq!(leases.sweep(), 1);
    assert!(leases.is_empty());
    assert!(leases.state("door").is_none());

    // Bad owners and ttls are the core's errors.
    assert!(matches!(
        leases.acquire_by("door", b"", SECOND),
        Err(AcquireError::Lease(LeaseError::Param(
            ParamError::OutOfRange { .. }
        )))
    ));
    assert!(leases.acquire_by("door", b"alice", 0).is_err());
    assert!(leases.renew_by("door", b"alice", 0).is_err());
}

/// An owner's release frees the lease a guard of the same owner holds as well: one
/// lease, counted by holds, whoever gives them back.
#[test]
fn guards_and_owners_share_one_lease() {
    let leases = KeyedLeases::new(Concurrency::lock(), 10);
    let guard = leases.try_acquire("k", Some(b"svc"), 60 * SECOND).unwrap();
    let by_owner = leases.acquire_by("k", b"svc", 60 * SECOND).unwrap();
    assert_eq!((by_owner.token, by_owner.holds), (guard.token(), 2));
    assert_eq!(leases.release_by("k", b"svc").unwrap().holds, 1);
    assert_eq!(guard.release(), Ok(0));
    assert!(leases.acquire_by("k", b"other", SECOND).is_ok());
}
