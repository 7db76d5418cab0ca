//! In-process leases beside tokio's `Semaphore`, same run: acquire and release one permit
//! of a limit of 16, uncontended and from two threads at once.
//!
//! sluicegate's lease reads the clock (`MonotonicClock`) for its expiry and fencing
//! token and records its owner; the semaphore counts permits and nothing else.
//! `sluicegate_manual_clock` reads a `ManualClock` (one atomic load) instead, to price
//! the clock. The `lease_parts` group prices the pieces of one pair alone: the clock
//! read, the pure transitions on a `LeaseState` (grant and release, an owner's bytes
//! copied in) and the lock family's on an `RwState`, the table's three atomic
//! read-modify-writes on their own, and two lock round trips. `lease_keyed` prices the
//! service's in-process table per acquire + release pair by name: `KeyedLeases` (the
//! leases) beside `KeyedRwLeases` (the lock family), shared and exclusive, fair or not,
//! on one key of a table of 100 000.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use criterion::{criterion_group, criterion_main, Criterion};
use sluicegate_benches::on_two_threads;
use sluicegate_core::memory::{KeyedLeases, KeyedRwLeases, Leases};
use sluicegate_core::rwlock::{LockMode, RwLease, RwState};
use sluicegate_core::{
    Clock, Concurrency, LeaseHost, LeaseRequest, LeaseState, ManualClock, MonotonicClock, SECOND,
};
use tokio::sync::Semaphore;

const PERMITS: u64 = 16;
const TTL: u64 = 30 * SECOND;

fn lease_inprocess(c: &mut Criterion) {
    let mut group = c.benchmark_group("lease_inprocess");
    let leases = Leases::new(Concurrency::new(PERMITS).unwrap());
    let semaphore = Semaphore::new(usize::try_from(PERMITS).unwrap());
    let sluicegate = || leases.try_acquire(None, TTL).map(|g| g.token()).is_ok();
    let tokio = || semaphore.try_acquire().is_ok();
    group.bench_function("sluicegate", |b| b.iter(sluicegate));
    group.bench_function("semaphore", |b| b.iter(tokio));
    let manual = Leases::with_clock(Concurrency::new(PERMITS).unwrap(), ManualClock::new(SECOND));
    group.bench_function("sluicegate_manual_clock", |b| {
        b.iter(|| manual.try_acquire(None, TTL).map(|g| g.token()).is_ok())
    });
    group.bench_function("sluicegate_2_threads", |b| {
        b.iter_custom(|iters| on_two_threads(iters, &sluicegate))
    });
    group.bench_function("semaphore_2_threads", |b| {
        b.iter_custom(|iters| on_two_threads(iters, &tokio))
    });
    group.finish();
}

fn lease_parts(c: &mut Criterion) {
    let mut group = c.benchmark_group("lease_parts");
    let clock = MonotonicClock::new();
    group.bench_function("monotonic_clock", |b| b.iter(|| clock.now()));
    let concurrency = Concurrency::new(PERMITS).unwrap();
    let mut state = LeaseState::default();
    let owner = [0xff, 0, 0, 0, 1, 0, 0, 0, 7];
    group.bench_function("transitions", |b| {
        b.iter(|| {
            let now = black_box(SECOND);
            let acquired = concurrency.acquire_in(&mut state, now, &owner, TTL);
            let released = concurrency.release_in(&mut state, now, &owner);
            (acquired.is_ok(), released.is_ok())
        })
    });
    let family = RwLease::counted(concurrency);
    let mut family_state = RwState::default();
    group.bench_function("family_transitions", |b| {
        b.iter(|| {
            let now = black_box(SECOND);
            let acquired =
                family.try_acquire_in(&mut family_state, now, &owner, LockMode::Shared, TTL);
            let released = family.release_in(&mut family_state, now, &owner);
            (acquired.is_ok(), released.is_ok())
        })
    });
    // The table's own work on a free slot without the clock: reserve it, take the
    // token, free it (three read-modify-writes of 64-bit words).
    let (slot, token) = (AtomicU64::new(0), AtomicU64::new(0));
    group.bench_function("three_atomic_rmws", |b| {
        b.iter(|| {
            let reserved = slot.compare_exchange(0, 1, Ordering::SeqCst, Ordering::SeqCst);
            let taken = token.fetch_add(1, Ordering::SeqCst);
            let freed = slot.compare_exchange(1, 0, Ordering::SeqCst, Ordering::SeqCst);
            (reserved.is_ok(), taken, freed.is_ok())
        })
    });
    let mutex = Mutex::new(0u64);
    group.bench_function("two_lock_round_trips", |b| {
        b.iter(|| {
            *mutex.lock().unwrap() += 1;
            *mutex.lock().unwrap() += 1;
        })
    });
    group.finish();
}

fn lease_keyed(c: &mut Criterion) {
    let mut group = c.benchmark_group("lease_keyed");
    let request = LeaseRequest::new("build-7").owner("worker-3").ttl(TTL);
    let concurrency = Concurrency::new(PERMITS).unwrap();
    let leases = KeyedLeases::<Vec<u8>>::new(concurrency, 100_000);
    group.bench_function("leases", |b| {
        b.iter(|| {
            let acquired = LeaseHost::acquire(&leases, &request).unwrap();
            (
                acquired.grant.is_some(),
                LeaseHost::release(&leases, &request).is_ok(),
            )
        })
    });
    for (name, lock, mode) in [
        (
            "family_shared",
            RwLease::counted(concurrency),
            LockMode::Shared,
        ),
        (
            "family_exclusive",
            RwLease::counted(concurrency),
            LockMode::Exclusive,
        ),
        (
            "family_shared_fair",
            RwLease::counted(concurrency).fair(),
            LockMode::Shared,
        ),
    ] {
        let locks = KeyedRwLeases::new(lock, 100_000);
        group.bench_function(name, |b| {
            b.iter(|| {
                let acquired = locks.acquire(&request, mode, None).unwrap();
                (acquired.grant.is_some(), locks.release(&request).is_ok())
            })
        });
    }
    group.finish();
}

criterion_group!(benches, lease_inprocess, lease_parts, lease_keyed);
criterion_main!(benches);
