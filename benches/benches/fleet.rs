//! `fleet_local`: the local decision path of a fleet node, the part of each decision
//! that does not call Redis, beside governor's direct limiter (the in-process peer) in
//! the same run. `prefetch` spends prefetched units with one atomic update (one take of
//! a million units refills it, a Redis call per million decisions); `split` decides
//! against the node's share under a mutex (a heartbeat per hour here). The goal is at
//! least 10 million decisions per second per node.

use sluicegate_test_support as common;

use std::num::NonZeroU32;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use sluicegate_core::{TokenBucket, MILLISECOND};
use sluicegate_redis::fleet::{FleetConfig, FleetLimiter, FleetMode};
use sluicegate_redis::RedisLimiter;

fn fleet_local(c: &mut Criterion) {
    let server = common::Server::start();
    let mut con = server.connection();
    let mut group = c.benchmark_group("fleet_local");
    group.throughput(Throughput::Elements(1));
    // Never denies: a million every millisecond (the scripts' largest capacity and
    // rate), batches of a million, an hour between heartbeats.
    let bucket = TokenBucket::new(1_000_000, 1_000_000, MILLISECOND).unwrap();
    for mode in [FleetMode::Prefetch, FleetMode::Split] {
        let config = FleetConfig {
            max_batch: 1_000_000,
            interval: Some(Duration::from_secs(3600)),
            ..FleetConfig::new(mode)
        };
        let limiter = RedisLimiter::new(bucket).unwrap().with_prefix(mode.name());
        let fleet = FleetLimiter::new(limiter, b"bench", config).unwrap();
        assert!(fleet.check(&mut con, 1).unwrap().allowed());
        group.bench_function(mode.name(), |b| {
            b.iter(|| {
                let decision = match fleet.try_local(1) {
                    Some(decision) => decision.allowed,
                    None => fleet.check(&mut con, 1).unwrap().allowed(),
                };
                assert!(decision);
            });
        });
    }
    let quota = governor::Quota::per_second(NonZeroU32::new(1_000_000_000).unwrap());
    let governor = governor::RateLimiter::direct(quota);
    group.bench_function("governor_direct", |b| {
        b.iter(|| assert!(governor.check().is_ok()));
    });
    group.finish();
}

criterion_group!(benches, fleet_local);
criterion_main!(benches);
