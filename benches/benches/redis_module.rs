//! The Redis module beside a plain `INCR` of the same keys on the same local
//! redis-server (the module loaded), in the same run: `INCR` is the floor for a one-key
//! command.
//!
//! `redis_module_pipelined`: pipelines of 64 commands, one per connection on four
//! threads. `redis_module_single`: one connection, one command per round trip.
//! `sluicegate_module` is `SLUICEGATE.CHECK` of a token bucket (10^6 refilled at 10^6/s);
//! `module_cl_throttle` is `CL.THROTTLE key 15 30 60`; `redis_cell` is the same command
//! on a second server running redis-cell's module instead (the two modules both name
//! `CL.THROTTLE`), measured when `REDIS_CELL_MODULE` names its `.so` (a peer built from
//! its source, not a dependency).
//!
//! The module is `SLUICEGATE_REDIS_MODULE` if set, else built here with `--release`.

use sluicegate_test_support as common;

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use redis::{Cmd, Pipeline};
use sluicegate_benches::{named_keys, BATCH, CONNECTIONS, KEYS};

/// Runs `iters` pipelines of `command` on the keys (see [`sluicegate_benches::pipelined`]);
/// returns the wall time.
fn pipelined(
    server: &common::Server,
    iters: u64,
    command: impl Fn(&[u8]) -> Cmd + Sync,
    keys: &[Vec<u8>],
) -> Duration {
    let connections = (0..CONNECTIONS).map(|_| server.connection()).collect();
    sluicegate_benches::pipelined(connections, iters, |con, start| {
        let mut pipe = Pipeline::with_capacity(BATCH);
        for j in 0..BATCH {
            pipe.add_command(command(&keys[(start + j) % KEYS]));
        }
        let _: Vec<redis::Value> = pipe.query(con).unwrap();
    })
}

fn check(key: &[u8]) -> Cmd {
    let mut cmd = redis::cmd("SLUICEGATE.CHECK");
    cmd.arg(1)
        .arg(key)
        .arg("token_bucket")
        .arg(1_000_000)
        .arg(1_000_000)
        .arg(1_000_000);
    cmd
}

fn throttle(key: &[u8]) -> Cmd {
    let mut cmd = redis::cmd("CL.THROTTLE");
    cmd.arg(key).arg(15).arg(30).arg(60);
    cmd
}

fn incr(key: &[u8]) -> Cmd {
    let mut cmd = redis::cmd("INCR");
    cmd.arg(key);
    cmd
}

/// The release build of the module, unless one is named.
fn release_module() {
    if std::env::var_os("SLUICEGATE_REDIS_MODULE").is_some() {
        return;
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = std::process::Command::new(cargo)
        .args([
            "build",
            "--quiet",
            "--release",
            "-p",
            "sluicegate-redis-module",
        ])
        .status()
        .expect("cargo");
    assert!(status.success(), "building the module failed");
    let target = std::env::var("CARGO_TARGET_DIR")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/../target").to_owned());
    std::env::set_var(
        "SLUICEGATE_REDIS_MODULE",
        format!("{target}/release/libsluicegate_redis_module.so"),
    );
}

fn module_benches(c: &mut Criterion) {
    release_module();
    let server = common::Server::start_with_module(false);
    let peer = std::env::var_os("REDIS_CELL_MODULE")
        .map(|cell| common::Server::start_loading(std::path::Path::new(&cell), &[]));
    let (tb, cell, counters) = (
        named_keys("tb:user:"),
        named_keys("cell:user:"),
        named_keys("incr:user:"),
    );
    type Case<'a> = (&'a str, fn(&[u8]) -> Cmd, &'a [Vec<u8>], &'a common::Server);
    let mut cases: Vec<Case> = vec![
        ("sluicegate_module", check, &tb, &server),
        ("module_cl_throttle", throttle, &cell, &server),
        ("incr", incr, &counters, &server),
    ];
    if let Some(peer) = &peer {
        cases.push(("redis_cell", throttle, &cell, peer));
    }

    let mut group = c.benchmark_group("redis_module_pipelined");
    group.throughput(Throughput::Elements(BATCH as u64));
    for &(name, command, keys, server) in &cases {
        group.bench_function(name, |b| {
            b.iter_custom(|iters| pipelined(server, iters, command, keys))
        });
    }
    group.finish();

    let mut group = c.benchmark_group("redis_module_single");
    group.throughput(Throughput::Elements(1));
    let mut i = 0;
    for &(name, command, keys, server) in &cases {
        let mut con = server.connection();
        group.bench_function(name, |b| {
            b.iter(|| {
                i = (i + 1) % KEYS;
                command(&keys[i]).query::<redis::Value>(&mut con).unwrap()
            })
        });
    }
    group.finish();
}

criterion_group!(benches, module_benches);
criterion_main!(benches);
