//! Nanoseconds per pure decision, one function per algorithm.
//!
//! Each iteration decides one unit-cost request against the state the previous one
//! returned, with time advancing so that most requests are admitted: the steady state
//! of a busy key.

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use sluicegate_core::{
    Algorithm, FixedWindow, LeakyBucket, Pacing, SlidingCounter, SlidingLog, Ticks, TokenBucket,
    SECOND,
};

/// 1000 per second, requests every 1.1 ms: nearly all admitted.
const LIMIT: u64 = 1000;
const STEP: Ticks = 1_100;

fn bench<A: Algorithm>(
    c: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    name: &str,
    alg: A,
) {
    let mut state = None;
    let mut now: Ticks = 1_700_000_000 * SECOND;
    c.bench_function(name, |b| {
        b.iter(|| {
            now += STEP;
            let (decision, next) = alg.decide(state.take(), black_box(now), black_box(1));
            state = next;
            decision
        })
    });
}

fn core_decide(c: &mut Criterion) {
    let mut group = c.benchmark_group("core_decide");
    bench(
        &mut group,
        "fixed_window",
        FixedWindow::new(LIMIT, SECOND).unwrap(),
    );
    bench(
        &mut group,
        "sliding_log",
        SlidingLog::new(LIMIT, SECOND).unwrap(),
    );
    bench(
        &mut group,
        "sliding_counter",
        SlidingCounter::new(LIMIT, SECOND).unwrap(),
    );
    bench(
        &mut group,
        "token_bucket",
        TokenBucket::new(LIMIT, LIMIT, SECOND).unwrap(),
    );
    bench(
        &mut group,
        "funnel",
        LeakyBucket::new(LIMIT, LIMIT, SECOND).unwrap(),
    );
    bench(
        &mut group,
        "pacing",
        Pacing::new(LIMIT, LIMIT, SECOND).unwrap(),
    );
    group.finish();
}

criterion_group!(benches, core_decide);
criterion_main!(benches);
