//! Locks across a failover, against real processes on loopback: a grant returned only
//! once a replica holds it (`WAIT`), given back when none acknowledges; and fencing
//! tokens that stay monotonic when the promoted replica never saw the last grants.

use std::time::{Duration, Instant};

use sluicegate_core::{Concurrency, LeaseRequest, SECOND};
use sluicegate_redis::{Error, Reconnecting, RedisLeases};

use crate::common::sentinel::{info, Sentinels};
use crate::common::{wait_until, Server};

/// A primary and a replica that has synced with it.
fn primary_and_replica() -> (Server, Server) {
    let primary = Server::start();
    let replica = Server::start_with(&["--replicaof", "127.0.0.1", &primary.port.to_string()]);
    wait_until("the replica did not sync", || {
        info(&replica, "replication").contains("master_link_status:up")
    });
    (primary, replica)
}

/// The median of `n` acquire-and-release rounds with `leases`, in microseconds.
fn median_acquire_us(leases: &RedisLeases, con: &mut redis::Connection, n: usize) -> u128 {
    let mut took: Vec<u128> = (0..n)
        .map(|_| {
            let request = LeaseRequest::new(b"timed").owner(b"a").ttl(SECOND);
            let start = Instant::now();
            let grant = leases.acquire(con, &request).unwrap().grant;
            let elapsed = start.elapsed().as_micros();
            assert!(grant.is_some());
            let _ = leases.release(con, &request).unwrap();
            elapsed
        })
        .collect();
    took.sort_unstable();
    took[n / 2]
}

#[test]
fn a_grant_waits_for_the_replica_and_is_given_back_without_it() {
    let (primary, replica) = primary_and_replica();
    let mut con = primary.connection();
    let lock = RedisLeases::new(Concurrency::lock());
    let durable = lock.clone().with_replicas(1, Duration::from_secs(1));
    let request = LeaseRequest::new(b"job").owner(b"a").ttl(10 * SECOND);

    // Acknowledged by the replica: granted, and the replica holds it.
    let grant = durable.acquire(&mut con, &request).unwrap().grant.unwrap();
    let on_replica = lock.state(&mut replica.connection(), b"job").unwrap();
    assert_eq!(on_replica.unwrap().last_token(), grant.token);
    // A renew waits too.
    let _ = durable.renew(&mut con, &request).unwrap();
    let _ = durable.release(&mut con, &request).unwrap();

    // What it costs: the median acquire with and without waiting.
    let plain = median_acquire_us(&lock, &mut con, 300);
    let waiting = median_acquire_us(&durable, &mut con, 300);
    println!("acquire p50: {plain} µs alone, {waiting} µs waiting for one replica");

    // A replica that does not answer: refused after the timeout, nothing held.
    let hasty = lock.clone().with_replicas(1, Duration::from_millis(50));
    replica.pause();
    let refused = hasty.acquire(&mut con, &request);
    let batch = hasty.acquire_batch(&mut con, &[request]).unwrap();
    replica.resume();
    assert!(
        matches!(
            refused,
            Err(Error::NotReplicated {
                acknowledged: 0,
                wanted: 1
            })
        ),
        "{refused:?}"
    );
    assert!(matches!(batch[..], [Err(Error::NotReplicated { .. })]));
    let state = lock.state(&mut con, b"job").unwrap();
    assert!(
        state.as_ref().is_none_or(|s| s.leases().is_empty()),
        "a grant no replica acknowledged was kept: {state:?}"
    );
    // Another owner gets the lock at once.
    let other = LeaseRequest::new(b"job").owner(b"b").ttl(SECOND);
    assert!(durable.acquire(&mut con, &other).unwrap().grant.is_some());
}

/// A grant at the request's own time that no replica acknowledges is given back at that
/// time, by an acquire and by a renew, sync and async: given back at the server's time,
/// where the lease had long expired, it stayed held at its own.
#[test]
fn a_grant_at_its_own_time_is_given_back_at_that_time() {
    let server = Server::start();
    let mut con = server.connection();
    let lock = RedisLeases::new(Concurrency::lock());
    let hasty = lock.clone().with_replicas(1, Duration::from_millis(20));
    let request = LeaseRequest::new(b"job")
        .owner(b"a")
        .ttl(10 * SECOND)
        .at(SECOND);
    let given_back = |con: &mut redis::Connection, what: &str| {
        let state = lock.state(con, b"job").unwrap();
        assert!(
            state.as_ref().is_none_or(|s| s.leases().is_empty()),
            "{what}: a grant no replica acknowledged was kept: {state:?}"
        );
    };
    let refused = hasty.acquire(&mut con, &request);
    assert!(
        matches!(refused, Err(Error::NotReplicated { .. })),
        "{refused:?}"
    );
    given_back(&mut con, "acquire");

    assert!(lock.acquire(&mut con, &request).unwrap().grant.is_some());
    let refused = hasty.renew(&mut con, &request);
    assert!(
        matches!(refused, Err(Error::NotReplicated { .. })),
        "{refused:?}"
    );
    given_back(&mut con, "renew");

    let (runtime, mut multiplexed) = server.multiplexed();
    let refused = runtime.block_on(hasty.acquire_async(&mut multiplexed, &request));
    assert!(
        matches!(refused, Err(Error::NotReplicated { .. })),
        "{refused:?}"
    );
    given_back(&mut con, "acquire_async");
}

#[test]
fn fencing_tokens_stay_monotonic_when_a_failover_loses_grants() {
    let mut set = Sentinels::start();
    let lock = RedisLeases::new(Concurrency::lock());
    let mut con = Reconnecting::open(&set.url(), None).unwrap();
    let mut issued = 0;
    let grant = |con: &mut Reconnecting, owner: &[u8]| {
        let request = LeaseRequest::new(b"lock").owner(owner).ttl(SECOND);
        let token = lock.acquire(con, &request)?.grant.expect("free").token;
        let _ = lock.release(con, &request)?;
        Ok::<u64, Error>(token)
    };
    for _ in 0..50 {
        let token = grant(&mut con, b"a").unwrap();
        assert!(token > issued);
        issued = token;
    }
    // The replica misses the last grants: they are lost with the primary.
    set.replica.pause();
    for _ in 0..5 {
        issued = grant(&mut con, b"b").unwrap();
    }
    set.primary.kill();
    set.replica.resume();
    wait_until("no promotion", || {
        set.primary_port() == Some(set.replica.port)
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    let remembered = loop {
        match lock.state(&mut con, b"lock") {
            Ok(state) => break state.map_or(0, |s| s.last_token()),
            Err(e) if e.is_unavailable() && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("{e}"),
        }
    };
    assert!(
        remembered < issued,
        "the promoted replica saw every grant ({remembered} of {issued}): nothing was lost"
    );
    // The new primary's next token is still above every token issued: tokens are at
    // least the server's time in µs, and the failover took longer than any two grants.
    let after = grant(&mut con, b"c").unwrap();
    assert!(
        after > issued,
        "token {after} after a failover, {issued} issued before"
    );
}
