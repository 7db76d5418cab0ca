//! sluicegate-sled beside a hand-written sled compare-and-swap increment, same keys, same
//! run: the floor for an atomic read-modify-write of one sled record.

use criterion::{criterion_group, criterion_main, Criterion};
use sled::Tree;
use sluicegate_core::{TokenBucket, SECOND};
use sluicegate_sled::{Durability, SledLimiter};

const KEYS: u32 = 1024;

/// Reads a counter and swaps in its increment, retrying on conflict.
fn raw_cas(tree: &Tree, key: &[u8]) -> u64 {
    let mut current = tree.get(key).unwrap();
    loop {
        let count = current.as_ref().map_or(0, |bytes| {
            u64::from_be_bytes(bytes.as_ref().try_into().unwrap())
        }) + 1;
        match tree
            .compare_and_swap(key, current.as_ref(), Some(&count.to_be_bytes()))
            .unwrap()
        {
            Ok(()) => return count,
            Err(conflict) => current = conflict.current,
        }
    }
}

fn sled_decide(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let db = sled::open(dir.path()).unwrap();
    let keys: Vec<[u8; 4]> = (0..KEYS).map(u32::to_be_bytes).collect();
    // A bucket that is never empty, so every decision writes a new state.
    let bucket = TokenBucket::new(1_000_000_000, 1_000_000_000, SECOND).unwrap();
    let mut group = c.benchmark_group("sled_decide");

    let limiter = SledLimiter::new(
        db.open_tree("sluicegate").unwrap(),
        bucket,
        Durability::Background,
    );
    let mut i = 0;
    group.bench_function("sluicegate", |b| {
        b.iter(|| {
            i = (i + 1) % keys.len();
            limiter.check(&keys[i], 1).unwrap().allowed
        })
    });
    let tree = db.open_tree("raw").unwrap();
    group.bench_function("raw_cas", |b| {
        b.iter(|| {
            i = (i + 1) % keys.len();
            raw_cas(&tree, &keys[i])
        })
    });
    let durable = SledLimiter::new(
        db.open_tree("durable").unwrap(),
        bucket,
        Durability::EveryDecision,
    );
    group.bench_function("sluicegate_flush_every_decision", |b| {
        b.iter(|| {
            i = (i + 1) % keys.len();
            durable.check(&keys[i], 1).unwrap().allowed
        })
    });
    group.finish();
}

criterion_group!(benches, sled_decide);
criterion_main!(benches);
