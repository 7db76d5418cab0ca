//! The in-process read-write and fair locks: the core's exact transitions under any
//! interleaving with explicit time, writers alone under real threads, fair grants in
//! queue order, one waiter woken per release, deadlines and cancellation.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use sluicegate_core::memory::{RwAcquireError, RwGuard, RwLeases, WaitCancel};
use sluicegate_core::rwlock::{LockMode, RwLease, RwState};
use sluicegate_core::{Grant, ManualClock, MILLISECOND};

use crate::common::LONG;

/// Polls `ready` until it holds, failing after 10 s (a loaded machine's thread start).
fn eventually(what: &str, ready: impl Fn() -> bool) {
    let start = Instant::now();
    while !ready() {
        assert!(start.elapsed() < Duration::from_secs(10), "never: {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn queued(host: &RwLeases) -> usize {
    host.state().map_or(0, |s| s.waiters().len())
}

/// A fair exclusive lock.
fn fair_mutex() -> RwLeases {
    RwLeases::new(RwLease::new(1).unwrap().fair())
}

fn hold<'a>(host: &'a RwLeases, owner: &[u8]) -> RwGuard<'a> {
    host.try_acquire(owner, LockMode::Exclusive, LONG).unwrap()
}

/// A blocking acquire that must be granted within 30 s.
fn wait_for<'a>(host: &'a RwLeases, owner: &[u8], mode: LockMode) -> RwGuard<'a> {
    host.acquire(owner, mode, LONG, Duration::from_secs(30), None)
        .unwrap()
}

fn lock_mode() -> impl Strategy<Value = LockMode> {
    prop_oneof![Just(LockMode::Shared), Just(LockMode::Exclusive)]
}

#[derive(Debug, Clone)]
enum Op {
    Try(u8, LockMode, u64),
    Release(u8),
    Renew(u8, u64),
    Downgrade(u8),
    Advance(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..4u8, lock_mode(), 1..40u64).prop_map(|(o, x, ttl)| Op::Try(o, x, ttl)),
        2 => (0..8u8).prop_map(Op::Release),
        1 => (0..8u8, 1..40u64).prop_map(|(i, ttl)| Op::Renew(i, ttl)),
        1 => (0..8u8).prop_map(Op::Downgrade),
        2 => (0..30u64).prop_map(Op::Advance),
    ]
}

proptest! {
    /// Any interleaving of tries, releases, renewals, downgrades and time: the host's
    /// grants, tokens and state are the core's, and a writer never stands beside
    /// another holder.
    #[test]
    fn the_host_carries_the_core_exactly(fair: bool, max in 1..4u64, ops in prop::collection::vec(op(), 1..80)) {
        let mut lease = RwLease::new(max).unwrap();
        if fair {
            lease = lease.fair();
        }
        let host = RwLeases::with_clock(lease, ManualClock::new(0));
        let mut core: Option<RwState> = None;
        let mut guards: Vec<RwGuard<'_, ManualClock>> = Vec::new();
        let mut now = 0;
        for op in ops {
            match op {
                Op::Try(o, x, ttl) => {
                    let owner = [b'a' + o];
                    let (want, next) = lease.try_acquire(core.clone(), now, &owner, x, ttl).unwrap();
                    core = next;
                    let got = host.try_acquire(&owner, x, ttl);
                    prop_assert_eq!(got.as_ref().ok().map(RwGuard::grant), want.grant);
                    if let Ok(guard) = got {
                        guards.push(guard);
                    }
                }
                Op::Release(i) if (i as usize) < guards.len() => {
                    let guard = guards.swap_remove(i as usize);
                    let owner = guard.owner().to_vec();
                    let want = lease.release(core.clone(), now, &owner);
                    if let Ok((_, next)) = &want {
                        core = next.clone();
                    }
                    prop_assert_eq!(guard.release().ok(), want.ok().map(|w| w.0));
                }
                Op::Renew(i, ttl) if (i as usize) < guards.len() => {
                    let guard = &mut guards[i as usize];
                    let want = lease.renew(core.clone(), now, guard.owner(), ttl);
                    if let Ok((_, next)) = &want {
                        core = next.clone();
                    }
                    prop_assert_eq!(guard.renew(ttl).ok(), want.ok().map(|w| w.0));
                }
                Op::Downgrade(i) if (i as usize) < guards.len() => {
                    let guard = &mut guards[i as usize];
                    let want = lease.downgrade(core.clone(), now, guard.owner());
                    if let Ok((_, next)) = &want {
                        core = next.clone();
                    }
                    prop_assert_eq!(guard.downgrade().ok(), want.ok().map(|w| w.0));
                }
                Op::Advance(by) => {
                    now += by;
                    host.clock().advance(by);
                }
                _ => {}
            }
            let live = core.clone().filter(|s| !s.is_fresh(now));
            prop_assert_eq!(host.state(), live);
            if let Some(state) = host.state() {
                let held: Vec<_> = state.holders().iter().filter(|h| h.expires_at() > now).collect();
                let writers = held.iter().filter(|h| h.mode() == LockMode::Exclusive).count();
                prop_assert!(writers == 0 || held.len() == 1, "{:?}", state);
            }
        }
    }
}

/// Readers and writers on 8 threads, blocking: no writer beside another holder, and
/// writers' tokens rise.
fn readers_and_writers(lease: RwLease) {
    let host = RwLeases::new(lease);
    let readers = AtomicI64::new(0);
    let writers = AtomicI64::new(0);
    let last_write = AtomicU64::new(0);
    std::thread::scope(|s| {
        for t in 0..8u8 {
            let (host, readers, writers, last_write) = (&host, &readers, &writers, &last_write);
            s.spawn(move || {
                let owner = [b'0' + t];
                for round in 0..150 {
                    let exclusive = (t + round) % 3 == 0;
                    let mode = if exclusive {
                        LockMode::Exclusive
                    } else {
                        LockMode::Shared
                    };
                    let guard = host
                        .acquire(&owner, mode, LONG, Duration::from_secs(30), None)
                        .unwrap();
                    if exclusive {
                        assert_eq!(writers.fetch_add(1, Ordering::SeqCst), 0);
                        assert_eq!(readers.load(Ordering::SeqCst), 0);
                        let before = last_write.swap(guard.token(), Ordering::SeqCst);
                        assert!(guard.token() > before);
                        std::thread::yield_now();
                        writers.fetch_sub(1, Ordering::SeqCst);
                    } else {
                        readers.fetch_add(1, Ordering::SeqCst);
                        assert_eq!(writers.load(Ordering::SeqCst), 0);
                        std::thread::yield_now();
                        readers.fetch_sub(1, Ordering::SeqCst);
                    }
                    drop(guard);
                }
            });
        }
    });
    // Tokens may run ahead of the clock by one tick per grant (1 200 here): the key is
    // fresh once the clock passes the last.
    std::thread::sleep(Duration::from_millis(10));
    assert_eq!(host.state(), None);
}

#[test]
fn writers_are_alone_under_threads_on_a_fair_lock() {
    readers_and_writers(RwLease::read_write().fair());
}

#[test]
fn writers_are_alone_under_threads_on_an_unfair_lock() {
    readers_and_writers(RwLease::read_write());
}

#[test]
fn writers_are_alone_under_threads_on_a_counted_lock() {
    readers_and_writers(RwLease::new(3).unwrap().fair());
}

/// Six waiters queued one after another on a fair lock are granted in that order, each
/// woken once: one wake per handoff.
#[test]
fn a_fair_lock_grants_in_queue_order_waking_one_per_release() {
    let host = fair_mutex();
    let granted = Mutex::new(Vec::new());
    let first = hold(&host, b"holder");
    std::thread::scope(|s| {
        for i in 0..6u8 {
            let (lock, granted) = (&host, &granted);
            s.spawn(move || {
                let guard = wait_for(lock, &[i + 1], LockMode::Shared);
                granted.lock().unwrap().push(i);
                std::thread::sleep(Duration::from_millis(2));
                drop(guard);
            });
            eventually("queued", || queued(&host) == usize::from(i) + 1);
        }
        assert_eq!(host.wakes(), 0);
        drop(first);
    });
    assert_eq!(*granted.lock().unwrap(), (0..6).collect::<Vec<u8>>());
    assert_eq!(host.wakes(), 6);
}

/// Twenty waiters on a fair lock: a release wakes the head alone; the rest stay asleep
/// and queued.
#[test]
fn a_release_wakes_exactly_one_of_twenty_waiters() {
    let host = fair_mutex();
    let holder = hold(&host, b"holder");
    let done = Mutex::new(());
    let keep = done.lock().unwrap();
    std::thread::scope(|s| {
        for i in 0..20u8 {
            let (host, done) = (&host, &done);
            s.spawn(move || {
                let guard = wait_for(host, &[i + 1], LockMode::Exclusive);
                // The first granted keeps the lock until the checks are made.
                drop(done.lock().unwrap());
                drop(guard);
            });
        }
        eventually("all queued", || queued(&host) == 20);
        drop(holder);
        eventually("the head granted", || queued(&host) == 19);
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(host.wakes(), 1);
        assert_eq!(queued(&host), 19);
        drop(keep);
    });
    assert_eq!(host.wakes(), 20);
}

#[test]
fn a_downgrade_lets_the_waiting_reader_in() {
    let host = RwLeases::new(RwLease::read_write().fair());
    let mut writer = host.try_acquire(b"w", LockMode::Exclusive, LONG).unwrap();
    std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let guard = host.acquire(b"r", LockMode::Shared, LONG, Duration::from_secs(30), None);
            guard.map(|g| g.token())
        });
        eventually("queued", || queued(&host) == 1);
        let token = writer.token();
        assert_eq!(writer.downgrade().map(|g| g.token), Ok(token));
        assert!(reader.join().unwrap().unwrap() > token);
    });
    assert_eq!(host.wakes(), 1);
}

/// On an unfair lock a refused reader is not queued; a release still wakes it.
#[test]
fn an_unfair_release_wakes_a_reader_the_core_did_not_queue() {
    let host = RwLeases::new(RwLease::read_write());
    let writer = host.try_acquire(b"w", LockMode::Exclusive, LONG).unwrap();
    std::thread::scope(|s| {
        let reader = s.spawn(|| {
            host.acquire(b"r", LockMode::Shared, LONG, Duration::from_secs(30), None)
                .map(|g| g.grant())
        });
        eventually("blocked", || host.blocked() == 1);
        assert_eq!(queued(&host), 0);
        let start = Instant::now();
        drop(writer);
        let granted: Grant = reader.join().unwrap().unwrap();
        assert!(
            start.elapsed() < Duration::from_secs(1),
            "woken, not timed out"
        );
        assert_eq!(granted.holds, 1);
    });
    assert_eq!(host.wakes(), 1);
}

#[test]
fn a_cancelled_or_timed_out_wait_gives_up_its_place() {
    let host = fair_mutex();
    let _holder = hold(&host, b"holder");
    let cancel = WaitCancel::new();
    std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            host.acquire(
                b"w",
                LockMode::Exclusive,
                LONG,
                Duration::from_secs(30),
                Some(&cancel),
            )
            .map(|g| g.token())
        });
        eventually("queued", || queued(&host) == 1);
        cancel.cancel();
        assert_eq!(waiter.join().unwrap(), Err(RwAcquireError::Cancelled));
    });
    assert_eq!(queued(&host), 0);
    let start = Instant::now();
    let late = host.acquire(
        b"w",
        LockMode::Exclusive,
        LONG,
        Duration::from_millis(30),
        None,
    );
    assert!(matches!(late, Err(RwAcquireError::Busy(d)) if !d.allowed));
    assert!(start.elapsed() >= Duration::from_millis(30));
    assert_eq!(queued(&host), 0);
}

/// A holder that never releases (a forgotten guard) blocks the head only until it
/// expires: the head sleeps until that instant, unwoken.
#[test]
fn a_forgotten_holder_lets_the_head_in_at_its_expiry() {
    let host = fair_mutex();
    std::mem::forget(
        host.try_acquire(b"gone", LockMode::Exclusive, 30 * MILLISECOND)
            .unwrap(),
    );
    let start = Instant::now();
    let guard = host
        .acquire(
            b"next",
            LockMode::Exclusive,
            LONG,
            Duration::from_secs(30),
            None,
        )
        .unwrap();
    assert!(start.elapsed() >= Duration::from_millis(25));
    assert!(start.elapsed() < Duration::from_secs(5));
    assert!(guard.token() > 0);
    assert_eq!(host.wakes(), 0);
}
