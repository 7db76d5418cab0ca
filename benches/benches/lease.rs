//! In-process leases beside tokio's `Semaphore`, same run: acquire and release one permit
//! of a limit of 16, uncontended and from two threads at once.
//!
//! tollgate's lease reads the clock (`MonotonicClock`) for its expiry and fencing token
//! and records its owner; the semaphore counts permits and nothing else.
//! `tollgate_manual_clock` reads a `ManualClock` (one atomic load) instead, to price the
//! clock.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use tokio::sync::Semaphore;
use tollgate_core::memory::Leases;
use tollgate_core::{Concurrency, ManualClock, SECOND};

const PERMITS: u64 = 16;
const TTL: u64 = 30 * SECOND;

/// Time for `iters` acquire-release pairs split over two threads at once.
fn two_threads(iters: u64, pair: &(impl Fn() -> bool + Sync)) -> Duration {
    let start = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                for _ in 0..iters / 2 {
                    black_box(pair());
                }
            });
        }
    });
    start.elapsed()
}

fn lease_inprocess(c: &mut Criterion) {
    let mut group = c.benchmark_group("lease_inprocess");
    let leases = Leases::new(Concurrency::new(PERMITS).unwrap());
    let semaphore = Semaphore::new(usize::try_from(PERMITS).unwrap());
    let tollgate = || leases.try_acquire(None, TTL).map(|g| g.token()).is_ok();
    let tokio = || semaphore.try_acquire().is_ok();
    group.bench_function("tollgate", |b| b.iter(tollgate));
    group.bench_function("semaphore", |b| b.iter(tokio));
    let manual = Leases::with_clock(Concurrency::new(PERMITS).unwrap(), ManualClock::new(SECOND));
    group.bench_function("tollgate_manual_clock", |b| {
        b.iter(|| manual.try_acquire(None, TTL).map(|g| g.token()).is_ok())
    });
    group.bench_function("tollgate_2_threads", |b| {
        b.iter_custom(|iters| two_threads(iters, &tollgate))
    });
    group.bench_function("semaphore_2_threads", |b| {
        b.iter_custom(|iters| two_threads(iters, &tokio))
    });
    group.finish();
}

criterion_group!(benches, lease_inprocess);
criterion_main!(benches);
