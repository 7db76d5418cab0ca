//! sluicegate's Redis lock beside the common single-server lock recipe on the same local
//! redis-server, in the same run: `SET key owner NX PX ttl` to acquire, a Lua compare-and-delete to release.
//! Each element is one acquire + release of a free lock.
//!
//! `lock_pipelined`: a pipeline of 64 acquires then one of 64 releases, on four
//! connections in four threads. `lock_single`: one connection, one call per round trip.
//! `sluicegate_module` is the same lock on the same server through the native module
//! (loaded with `--loadmodule`: `SLUICEGATE_REDIS_MODULE`, else its release build), which
//! the client detects; `sluicegate_lock` is forced onto the function library.

use sluicegate_test_support as common;

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use redis::{Connection, Pipeline};
use sluicegate_benches::{named_keys, BATCH, COMPARE_AND_DELETE, CONNECTIONS, KEYS};
use sluicegate_core::{Concurrency, LeaseRequest};
use sluicegate_redis::{RedisLeases, Route};

const TTL_MS: u64 = 10_000;

/// Runs `iters` batches split over [`CONNECTIONS`] threads, each on its own connection
/// and its own keys; returns the wall time.
fn pipelined(
    server: &common::Server,
    iters: u64,
    run: impl Fn(&mut Connection, usize, &[u8]) + Sync,
) -> Duration {
    let connections = (0..CONNECTIONS).map(|_| server.connection()).collect();
    sluicegate_benches::on_threads(connections, iters, |t, con, rounds| {
        let owner = format!("owner-{t}");
        // Thread t uses keys t, t + 4, ...: no two threads contend.
        let mut start = 0;
        for _ in 0..rounds {
            start = (start + BATCH) % (KEYS / CONNECTIONS);
            run(con, start * CONNECTIONS + t, owner.as_bytes());
        }
    })
}

fn key(keys: &[Vec<u8>], start: usize, j: usize) -> &[u8] {
    &keys[(start + j * CONNECTIONS) % KEYS]
}

fn sluicegate_batch(
    leases: &RedisLeases,
    con: &mut Connection,
    keys: &[Vec<u8>],
    start: usize,
    owner: &[u8],
) {
    let acquires: Vec<LeaseRequest> = (0..BATCH)
        .map(|j| {
            LeaseRequest::new(key(keys, start, j))
                .owner(owner)
                .ttl(TTL_MS * 1000)
        })
        .collect();
    for result in leases.acquire_batch(con, &acquires).unwrap() {
        assert!(result.unwrap().decision.allowed);
    }
    for result in leases.release_batch(con, &acquires).unwrap() {
        assert_eq!(result.unwrap().holds, 0);
    }
}

fn recipe_batch(sha: &str, con: &mut Connection, keys: &[Vec<u8>], start: usize, owner: &[u8]) {
    let mut pipe = Pipeline::with_capacity(BATCH);
    for j in 0..BATCH {
        pipe.cmd("SET")
            .arg(key(keys, start, j))
            .arg(owner)
            .arg("NX")
            .arg("PX")
            .arg(TTL_MS);
    }
    let set: Vec<Option<String>> = pipe.query(con).unwrap();
    assert!(set.iter().all(Option::is_some));
    let mut pipe = Pipeline::with_capacity(BATCH);
    for j in 0..BATCH {
        pipe.cmd("EVALSHA")
            .arg(sha)
            .arg(1)
            .arg(key(keys, start, j))
            .arg(owner);
    }
    let deleted: Vec<u64> = pipe.query(con).unwrap();
    assert!(deleted.iter().all(|&d| d == 1));
}

fn lock_benches(c: &mut Criterion) {
    let server = common::Server::start_with_module(true);
    let keys = named_keys("sluicegate:lock:");
    let module_keys = named_keys("module:lock:");
    let recipe_keys = named_keys("recipe:lock:");
    let lock = RedisLeases::new(Concurrency::lock())
        .with_route(Route::Functions)
        .unwrap();
    let module = RedisLeases::new(Concurrency::lock());
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(COMPARE_AND_DELETE)
        .query(&mut server.connection())
        .unwrap();

    let mut group = c.benchmark_group("lock_pipelined");
    group.throughput(Throughput::Elements(BATCH as u64));
    group.bench_function("sluicegate_lock", |b| {
        b.iter_custom(|iters| {
            pipelined(&server, iters, |con, start, owner| {
                sluicegate_batch(&lock, con, &keys, start, owner)
            })
        })
    });
    group.bench_function("sluicegate_module", |b| {
        b.iter_custom(|iters| {
            pipelined(&server, iters, |con, start, owner| {
                sluicegate_batch(&module, con, &module_keys, start, owner)
            })
        })
    });
    group.bench_function("set_nx_px_and_compare_delete", |b| {
        b.iter_custom(|iters| {
            pipelined(&server, iters, |con, start, owner| {
                recipe_batch(&sha, con, &recipe_keys, start, owner)
            })
        })
    });
    group.finish();

    let mut group = c.benchmark_group("lock_single");
    group.throughput(Throughput::Elements(1));
    let mut con = server.connection();
    let mut i = 0;
    for (name, leases, keys) in [
        ("sluicegate_lock", &lock, &keys),
        ("sluicegate_module", &module, &module_keys),
    ] {
        group.bench_function(name, |b| {
            b.iter(|| {
                i = (i + 1) % KEYS;
                let granted = leases
                    .acquire(
                        &mut con,
                        &LeaseRequest::new(&keys[i])
                            .owner(b"owner")
                            .ttl(TTL_MS * 1000),
                    )
                    .unwrap();
                assert!(granted.decision.allowed);
                leases
                    .release(&mut con, &LeaseRequest::new(&keys[i]).owner(b"owner"))
                    .unwrap()
            })
        });
    }
    assert_eq!(module.route(), Some(Route::Module));
    group.bench_function("set_nx_px_and_compare_delete", |b| {
        b.iter(|| {
            i = (i + 1) % KEYS;
            let set: Option<String> = redis::cmd("SET")
                .arg(&recipe_keys[i])
                .arg("owner")
                .arg("NX")
                .arg("PX")
                .arg(TTL_MS)
                .query(&mut con)
                .unwrap();
            assert!(set.is_some());
            let deleted: u64 = redis::cmd("EVALSHA")
                .arg(&sha)
                .arg(1)
                .arg(&recipe_keys[i])
                .arg("owner")
                .query(&mut con)
                .unwrap();
            assert_eq!(deleted, 1);
        })
    });
    group.finish();
}

criterion_group!(benches, lock_benches);
criterion_main!(benches);
