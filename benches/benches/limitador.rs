//! The libraries beside the service's peer: sluicegate's keyed limiter beside the
//! published `limitador` crate's `RateLimiter`, the same limit (a fixed window of 10^6 a
//! second per key, so every call is admitted and counted) over the same keys, walked in
//! the same order, in memory. (limitador 0.14's Redis storage builds only with its
//! RocksDB storage, so the Redis comparison is the `load` program's, server to server.)
//!
//! ```text
//! cargo bench -p sluicegate-benches --bench limitador
//! ```
//!
//! limitador is called as its server calls it: a namespace and a context holding the
//! descriptor (`descriptors[0]['k']`), made once per key before the measured loop, as
//! sluicegate's keys are.

use std::collections::HashMap;
use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use limitador::limit::{Context, Limit, Namespace};
use limitador::RateLimiter;
use sluicegate_benches::walk;
use sluicegate_core::memory::KeyedLimiter;
use sluicegate_core::{FixedWindow, TokenBucket, SECOND};

const LIMIT: u64 = 1_000_000;
const KEYS: usize = 10_000;

/// The keys `k0`, `k1`, … as both libraries take them.
fn keys() -> Vec<String> {
    (0..KEYS).map(|k| format!("k{k}")).collect()
}

/// The item of step `step` of the walk over `items` (the same for every limiter).
fn pick<T>(items: &[T], step: u64) -> &T {
    &items[usize::try_from(walk(step, items.len() as u64)).unwrap_or(0)]
}

/// limitador's `limiter` with the one limit, and a context per key.
fn limitador(limiter: RateLimiter) -> (RateLimiter, Namespace, Vec<Context<'static>>) {
    let variable = "descriptors[0]['k']".try_into().expect("a CEL expression");
    limiter.add_limit(Limit::new("bench", LIMIT, 1, [], [variable]));
    let contexts = keys()
        .into_iter()
        .map(|key| {
            let mut ctx = Context::default();
            ctx.list_binding(
                "descriptors".into(),
                vec![HashMap::from([("k".into(), key)])],
            );
            ctx
        })
        .collect();
    (limiter, "bench".into(), contexts)
}

fn memory(c: &mut Criterion) {
    let mut group = c.benchmark_group("limitador_memory");
    let keys = keys();
    let window = KeyedLimiter::new(FixedWindow::new(LIMIT, SECOND).unwrap(), 2 * KEYS);
    let bucket = KeyedLimiter::new(TokenBucket::new(LIMIT, LIMIT, SECOND).unwrap(), 2 * KEYS);
    let (peer, namespace, contexts) = limitador(RateLimiter::new(2 * KEYS as u64));
    let mut step = 0;
    group.bench_function("sluicegate_fixed_window", |b| {
        b.iter(|| {
            step += 1;
            window.check(pick(&keys, step).as_str(), 1).allowed
        })
    });
    group.bench_function("sluicegate_token_bucket", |b| {
        b.iter(|| {
            step += 1;
            bucket.check(pick(&keys, step).as_str(), 1).allowed
        })
    });
    group.bench_function("limitador", |b| {
        b.iter(|| {
            step += 1;
            let ctx = pick(&contexts, step);
            black_box(
                peer.check_rate_limited_and_update(&namespace, ctx, 1)
                    .unwrap(),
            )
            .limited
        })
    });
    group.finish();
}

criterion_group!(benches, memory);
criterion_main!(benches);
