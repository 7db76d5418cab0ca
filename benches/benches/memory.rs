//! In-process limiting beside governor: same quota, same run, each on its default clock
//! (sluicegate's `MonotonicClock`, governor's `DefaultClock`, both on the CPU counter
//! through quanta). `memory_direct/governor_std` adds governor on `std::time::Instant`
//! for reference. The `clock` group prices the clocks alone.

use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::Instant;

use criterion::{criterion_group, criterion_main, Criterion};
use governor::clock::{Clock as _, MonotonicClock as GovernorMonotonic, QuantaClock};
use governor::middleware::NoOpMiddleware;
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota, RateLimiter};
use sluicegate_benches::{on_two_threads, walk};
use sluicegate_core::memory::__bench::{StateCell, WordState};
use sluicegate_core::memory::{DirectLimiter, InMemory, KeyedLimiter};
use sluicegate_core::{
    Algorithm, BucketState, Clock, Decision, MonotonicClock, SystemClock, TokenBucket, SECOND,
};

/// A billion per second: a tight loop is always admitted.
const DIRECT_RATE: u32 = 1_000_000_000;
/// Per key: 1000 per second with a burst of 1000.
const KEYED_RATE: u32 = 1_000;
const KEYS: u64 = 100_000;

fn quota(rate: u32) -> Quota {
    Quota::per_second(NonZeroU32::new(rate).unwrap())
}

fn bucket(rate: u32) -> TokenBucket {
    TokenBucket::new(rate.into(), rate.into(), SECOND).unwrap()
}

fn clock(c: &mut Criterion) {
    let mut group = c.benchmark_group("clock");
    let monotonic = MonotonicClock::new();
    group.bench_function("sluicegate_monotonic", |b| b.iter(|| monotonic.now()));
    group.bench_function("sluicegate_system", |b| b.iter(|| SystemClock.now()));
    group.bench_function("instant_now", |b| b.iter(Instant::now));
    let quanta = QuantaClock::default();
    group.bench_function("governor_quanta", |b| b.iter(|| quanta.now()));
    group.finish();
}

/// Governor's direct limiter on its default clock.
type GovernorDirect = RateLimiter<
    NotKeyed,
    InMemoryState,
    QuantaClock,
    NoOpMiddleware<governor::clock::QuantaInstant>,
>;

fn memory_direct(c: &mut Criterion) {
    let mut group = c.benchmark_group("memory_direct");
    let sluicegate = DirectLimiter::new(bucket(DIRECT_RATE));
    group.bench_function("sluicegate", |b| b.iter(|| sluicegate.check(1).allowed));
    let governor: GovernorDirect = RateLimiter::direct(quota(DIRECT_RATE));
    group.bench_function("governor", |b| b.iter(|| governor.check().is_ok()));
    let std = RateLimiter::direct_with_clock(quota(DIRECT_RATE), GovernorMonotonic);
    group.bench_function("governor_std", |b| b.iter(|| std.check().is_ok()));
    group.finish();
}

fn memory_keyed(c: &mut Criterion) {
    let mut group = c.benchmark_group("memory_keyed");
    let sluicegate = KeyedLimiter::new(bucket(KEYED_RATE), 200_000);
    let governor = RateLimiter::keyed(quota(KEYED_RATE));
    for key in 0..KEYS {
        let _ = sluicegate.check(&key, 1);
        let _ = governor.check_key(&key);
    }
    let mut step = 0;
    group.bench_function("sluicegate", |b| {
        b.iter(|| {
            step += 1;
            sluicegate.check(&walk(step, KEYS), 1).allowed
        })
    });
    group.bench_function("governor", |b| {
        b.iter(|| {
            step += 1;
            governor.check_key(&walk(step, KEYS)).is_ok()
        })
    });
    group.finish();
}

fn memory_direct_contended(c: &mut Criterion) {
    let mut group = c.benchmark_group("memory_direct_contended");
    let sluicegate = DirectLimiter::new(bucket(DIRECT_RATE));
    group.bench_function("sluicegate", |b| {
        b.iter_custom(|iters| on_two_threads(iters, &|| sluicegate.check(1).allowed))
    });
    let governor: GovernorDirect = RateLimiter::direct(quota(DIRECT_RATE));
    group.bench_function("governor", |b| {
        b.iter_custom(|iters| on_two_threads(iters, &|| governor.check().is_ok()))
    });
    group.finish();
}

/// A clock one tick later at each reading, at the cost of a plain add.
struct Ticking(std::cell::Cell<u64>);

impl Clock for Ticking {
    fn now(&self) -> u64 {
        self.0.set(self.0.get() + 1);
        self.0.get()
    }
}

/// The pieces of one `memory_direct/sluicegate` decision alone: the clock, the pure
/// decision on the unpacked state (the state the bench's limiter holds; the exact
/// 128-bit path), the limiter's decision on its word without the clock, and the 64-bit
/// cell's load and compare-and-swap around a transition that computes nothing.
fn memory_parts(c: &mut Criterion) {
    let mut group = c.benchmark_group("memory_parts");
    let clock = MonotonicClock::new();
    group.bench_function("clock", |b| b.iter(|| clock.now()));
    let algorithm = bucket(DIRECT_RATE);
    let now = clock.now();
    let (_, state) = algorithm.decide(None, now, 1);
    group.bench_function("decide", |b| {
        b.iter(|| algorithm.decide(black_box(state), black_box(now), 1))
    });
    // The limiter's whole decision on a clock that costs nothing: one microsecond later
    // each time, as a busy limiter sees it.
    let ticking = DirectLimiter::with_clock(algorithm, Ticking(std::cell::Cell::new(now)));
    group.bench_function("decide_in_cell", |b| b.iter(|| ticking.check(1).allowed));
    let cell = algorithm.cell();
    let mut tick = now;
    group.bench_function("cell_update", |b| {
        b.iter(|| {
            tick += 1;
            // A multiple of gcd(rate, period), as every bucket state is.
            let next = BucketState::from_word(u128::from(tick) * u128::from(SECOND));
            cell.update(|_| (Decision::admit(1, 0, 0, 0), next))
        })
    });
    group.finish();
}

criterion_group!(
    benches,
    clock,
    memory_parts,
    memory_direct,
    memory_keyed,
    memory_direct_contended
);
criterion_main!(benches);
