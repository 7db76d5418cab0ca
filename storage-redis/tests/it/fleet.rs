//! Fleet modes on a real `redis-server`: the prefetch ceiling under random traffic from
//! several nodes, the split's recomputation when a heartbeat expires, a server restarted
//! mid-run, and settings that cannot work refused.

use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use sluicegate_core::{
    FixedWindow, ParamError, Request, SlidingCounter, Ticks, TokenBucket, MILLISECOND, SECOND,
};
use sluicegate_redis::fleet::{FleetAlgorithm, FleetConfig, FleetLimiter, FleetMode};
use sluicegate_redis::{Error, Outcome, Reconnecting, RedisLimiter};

use crate::common::Server;

fn wall() -> Ticks {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    u64::try_from(since.as_micros()).unwrap()
}

fn config(mode: FleetMode, max_batch: u64, interval_ms: u64) -> FleetConfig {
    FleetConfig {
        max_batch,
        interval: Some(Duration::from_millis(interval_ms)),
        ..FleetConfig::new(mode)
    }
}

fn node<A: FleetAlgorithm>(_server: &Server, algorithm: A, config: FleetConfig) -> FleetLimiter<A> {
    let limiter = RedisLimiter::new(algorithm).unwrap().with_prefix("fleet:");
    FleetLimiter::new(limiter, b"shared", config).unwrap()
}

/// A small xorshift: each node's random gaps and costs.
fn random(seed: &mut u64) -> u64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    *seed
}

/// Runs `nodes` prefetch nodes, two threads each, offering random traffic (gaps of
/// 0..`gap` µs, costs 1..=3) for `run`, with upkeep; returns every admission's wall time
/// and cost, and the wall time before the first call.
fn prefetch_run<A: FleetAlgorithm>(
    server: &Server,
    algorithm: A,
    nodes: usize,
    gap: u64,
    run: Duration,
) -> (Ticks, Vec<(Ticks, u64)>) {
    let admitted = Arc::new(Mutex::new(Vec::new()));
    let barrier = Arc::new(Barrier::new(nodes * 2));
    let start = wall();
    let mut handles = Vec::new();
    for n in 0..nodes {
        let fleet = Arc::new(node(
            server,
            algorithm.clone(),
            config(FleetMode::Prefetch, 20, 20),
        ));
        for t in 0..2 {
            let (fleet, admitted, barrier) = (fleet.clone(), admitted.clone(), barrier.clone());
            let client = server.client();
            handles.push(thread::spawn(move || {
                let mut con = Reconnecting::new(client);
                let mut seed = 0x9E37_79B9 + (n * 2 + t) as u64;
                barrier.wait();
                let end = Instant::now() + run;
                while Instant::now() < end {
                    let cost = 1 + random(&mut seed) % 3;
                    if let Ok(outcome) = fleet.check(&mut con, cost) {
                        if outcome.allowed() {
                            admitted.lock().unwrap().push((wall(), cost));
                        }
                    }
                    if t == 0 {
                        fleet.tick(&mut con).unwrap();
                    }
                    thread::sleep(Duration::from_micros(random(&mut seed) % gap));
                }
                if t == 0 {
                    fleet.shutdown(&mut con).unwrap();
                }
            }));
        }
    }
    for handle in handles {
        handle.join().unwrap();
    }
    let mut admitted = Arc::try_unwrap(admitted).unwrap().into_inner().unwrap();
    admitted.sort_unstable();
    (start, admitted)
}

/// A [`prefetch_run`] of the window algorithm `new` makes of `limit` and `period`: the
/// units admitted in each aligned window, none above the limit.
fn per_window<A: FleetAlgorithm>(
    server: &Server,
    new: fn(u64, Ticks) -> Result<A, ParamError>,
    (limit, period): (u64, Ticks),
    nodes: usize,
    gap: u64,
    run: Duration,
) -> std::collections::BTreeMap<Ticks, u64> {
    let algorithm = new(limit, period).unwrap();
    let (_, admitted) = prefetch_run(server, algorithm, nodes, gap, run);
    let mut per_window = std::collections::BTreeMap::new();
    for (at, cost) in admitted {
        *per_window.entry(at / period).or_insert(0) += cost;
    }
    assert!(
        per_window.values().all(|&n| n <= limit),
        "a window admitted more than {limit}: {per_window:?}"
    );
    per_window
}

/// Several prefetch nodes never admit more than a fixed window's limit in any window.
#[test]
fn prefetch_never_exceeds_a_window() {
    let server = Server::start();
    // About 640 units a second against 600: windows fill near their end, when units
    // taken late must not be spent in the next window.
    let (limit, period) = (60, 100 * MILLISECOND);
    let run = Duration::from_millis(1500);
    let per_window = per_window(&server, FixedWindow::new, (limit, period), 4, 50_000, run);
    let busiest = per_window.values().max().copied().unwrap_or(0);
    assert!(
        busiest >= limit * 3 / 4,
        "windows far from full: {per_window:?}"
    );
}

/// Several prefetch nodes never admit more than a sliding counter's limit in an aligned
/// window, nor a token bucket more than it made: capacity plus the refill since start.
#[test]
fn prefetch_never_exceeds_a_bucket_or_a_sliding_counter() {
    let server = Server::start();
    let (capacity, rate, period) = (40, 200, SECOND);
    let (start, admitted) = prefetch_run(
        &server,
        TokenBucket::new(capacity, rate, period).unwrap(),
        3,
        400,
        Duration::from_millis(800),
    );
    let mut total = 0;
    for (at, cost) in &admitted {
        total += cost;
        let made = capacity + (at - start) * rate / period;
        assert!(
            total <= made,
            "{total} admitted by {at}, the bucket made {made}"
        );
    }
    assert!(
        total >= capacity + rate / 2,
        "the bucket was hardly used: {total}"
    );

    let run = Duration::from_millis(800);
    per_window(
        &server,
        SlidingCounter::new,
        (50, 100 * MILLISECOND),
        3,
        30_000,
        run,
    );
}

/// A node whose heartbeat expires leaves its share to the others at their next
/// heartbeat; a node that leaves does so at once.
#[test]
fn split_recomputes_shares_when_a_heartbeat_expires() {
    let server = Server::start();
    let mut con = server.connection();
    let window = FixedWindow::new(91, 3600 * SECOND).unwrap();
    // Heartbeats every 400 ms, their ttl 1.2 s: a round of ticks may be 750 ms late on a
    // loaded machine and still see the others alive.
    let split = config(FleetMode::Split, 1, 400);
    let nodes: Vec<_> = ["a", "b", "c"]
        .iter()
        .map(|id| node(&server, window, split).with_node_id(*id))
        .collect();
    // Each sees all three at its second heartbeat, one interval later.
    for round in 0..2 {
        thread::sleep(Duration::from_millis(450 * round));
        for n in &nodes {
            n.tick(&mut con).unwrap();
        }
    }
    let shares: Vec<_> = nodes.iter().map(|n| n.membership().unwrap()).collect();
    assert_eq!(shares, [(3, 0), (3, 1), (3, 2)]);
    // 91 = 31 + 30 + 30: the first in id order takes the remainder.
    let admitted = |n: &FleetLimiter<FixedWindow>| {
        (0..100)
            .filter(|_| n.try_local(1).is_some_and(|d| d.allowed))
            .count()
    };
    assert_eq!(admitted(&nodes[0]), 31);
    assert_eq!(admitted(&nodes[1]), 30);

    // "c" dies without leaving: after its ttl (3 intervals), "a" and "b" split 91 in two,
    // carrying what they used (31 of 46 for "a", 30 of 45 for "b").
    let [a, b, _c] = <[_; 3]>::try_from(nodes).ok().unwrap();
    // Polled for 10 s: the 1.2 s ttl late on a loaded machine; never recomputed fails.
    let deadline = Instant::now() + Duration::from_secs(10);
    while a.membership() != Some((2, 0)) || b.membership() != Some((2, 1)) {
        assert!(
            Instant::now() < deadline,
            "shares not recomputed: {:?}",
            a.membership()
        );
        thread::sleep(Duration::from_millis(10));
        a.tick(&mut con).unwrap();
        b.tick(&mut con).unwrap();
    }
    assert_eq!(admitted(&a), 46 - 31);
    assert_eq!(admitted(&b), 45 - 30);

    // "b" leaves: "a" holds the whole limit at its next heartbeat.
    b.shutdown(&mut con).unwrap();
    thread::sleep(Duration::from_millis(450));
    a.tick(&mut con).unwrap();
    assert_eq!(a.membership(), Some((1, 0)));
    assert_eq!(admitted(&a), 91 - 46);
}

/// A node leaving removes itself only: the others' heartbeats stand.
#[test]
fn split_a_node_leaving_leaves_the_others_counted() {
    let server = Server::start();
    let mut con = server.connection();
    let window = FixedWindow::new(90, 3600 * SECOND).unwrap();
    let nodes: Vec<_> = ["x", "y", "z"]
        .iter()
        // 800 ms intervals: z's 2.4 s heartbeat outlives a slow 900 ms step and round trips.
        .map(|id| node(&server, window, config(FleetMode::Split, 1, 800)).with_node_id(*id))
        .collect();
    for round in 0..2 {
        thread::sleep(Duration::from_millis(900 * round));
        for n in &nodes {
            n.tick(&mut con).unwrap();
        }
    }
    assert_eq!(nodes[0].membership(), Some((3, 0)));
    nodes[1].shutdown(&mut con).unwrap();
    thread::sleep(Duration::from_millis(900));
    nodes[0].tick(&mut con).unwrap();
    assert_eq!(nodes[0].membership(), Some((2, 0)), "z still beats");
}

/// A server restarted mid-run: held units are still spent, a give-back that fails is
/// dropped (never sent twice), then decisions follow the fail policy with a typed error,
/// then the node takes again; a batch node's unsettled count is settled once, after the
/// restart; a split node decides alone for its heartbeat's ttl, then by the policy.
#[test]
fn a_restarted_server_resumes_without_double_spending() {
    let mut server = Server::start();
    let window = FixedWindow::new(1000, 3600 * SECOND).unwrap();
    // A loaded machine's round trip fits in 1 s; a killed server refuses at once.
    let mut con = Reconnecting::new(server.client()).with_timeout(Duration::from_secs(1));
    // Intervals of 600 ms: the kill and the checks after it may take 1 s on a loaded
    // machine and still fall inside the grant (1.2 s) and the heartbeat's ttl (1.8 s).
    let prefetch = node(&server, window, config(FleetMode::Prefetch, 10, 600));
    let batch = node(&server, window, config(FleetMode::Batch, 50, 600));
    let split = node(&server, window, config(FleetMode::Split, 1, 600));
    assert!(split.check(&mut con, 1).unwrap().allowed());
    assert!(prefetch.check(&mut con, 1).unwrap().allowed());
    for _ in 0..5 {
        assert!(batch.check(&mut con, 1).unwrap().allowed());
    }

    server.kill();
    let killed = Instant::now();
    // The split node keeps its share while its view is younger than the heartbeat's
    // ttl (3 intervals), then follows the policy.
    assert!(matches!(split.check(&mut con, 1).unwrap(), Outcome::Decided(d) if d.allowed));
    // Units held are spent without Redis.
    for _ in 0..4 {
        assert!(matches!(prefetch.check(&mut con, 1).unwrap(), Outcome::Decided(d) if d.allowed));
    }
    // The grant expires (after two intervals): its 5 units cannot be given back and are
    // dropped; then the policy (the default, `Error`) returns the error, within the
    // connection's timeout.
    thread::sleep(Duration::from_millis(1300));
    prefetch.tick(&mut con).unwrap();
    let started = Instant::now();
    assert!(matches!(
        prefetch.check(&mut con, 1),
        Err(Error::Unavailable(_))
    ));
    // 3 s for a loaded machine; refused at once, a hang would be the failure.
    assert!(started.elapsed() < Duration::from_secs(3));
    // The batch node cannot settle its 5 units: it keeps them, and the policy answers.
    thread::sleep(Duration::from_millis(700));
    assert!(matches!(
        batch.check(&mut con, 1),
        Err(Error::Unavailable(_))
    ));
    thread::sleep(Duration::from_millis(2000).saturating_sub(killed.elapsed()));
    assert!(matches!(
        split.check(&mut con, 1),
        Err(Error::Unavailable(_))
    ));

    server.restart();
    thread::sleep(Duration::from_millis(700));
    assert!(matches!(prefetch.check(&mut con, 1).unwrap(), Outcome::Decided(d) if d.allowed));
    assert!(batch.check(&mut con, 1).unwrap().allowed());
    assert!(matches!(split.check(&mut con, 1).unwrap(), Outcome::Decided(d) if d.allowed));
    prefetch.shutdown(&mut con).unwrap();
    batch.shutdown(&mut con).unwrap();
    // The restarted server (no persistence) knows what was used since: the prefetch
    // node's one unit (the rest of its new batch given back, the dropped 5 never), the
    // batch node's 5 units settled once and its sixth.
    let limiter = RedisLimiter::new(window).unwrap().with_prefix("fleet:");
    let left = limiter
        .take(&mut con, &Request::new(b"shared").cost(0))
        .unwrap()
        .decision
        .remaining;
    assert_eq!(left, 1000 - 1 - 6);
}

/// Settings that cannot work are refused, naming the setting and why.
#[test]
fn bad_settings_are_refused() {
    let limiter = || RedisLimiter::new(TokenBucket::new(100, 10, SECOND).unwrap()).unwrap();
    for (mode, max_batch, expected) in [
        (
            FleetMode::Batch,
            0,
            "fleet setting max_batch: must be at least 1",
        ),
        (
            FleetMode::Prefetch,
            0,
            "fleet setting max_batch: must be at least 1",
        ),
        (
            FleetMode::Batch,
            101,
            "fleet setting max_batch: 101 is above the limit of 100",
        ),
        (
            FleetMode::Prefetch,
            5000,
            "fleet setting max_batch: 5000 is above the limit of 100",
        ),
    ] {
        let config = FleetConfig {
            max_batch,
            ..FleetConfig::new(mode)
        };
        let error = FleetLimiter::new(limiter(), b"k", config).unwrap_err();
        assert!(matches!(error, Error::FleetSetting { .. }));
        assert_eq!(error.to_string(), expected);
    }
    let zero = FleetConfig {
        interval: Some(Duration::ZERO),
        ..FleetConfig::new(FleetMode::Split)
    };
    let error = FleetLimiter::new(limiter(), b"k", zero).unwrap_err();
    assert_eq!(
        error.to_string(),
        "fleet setting interval: 0ns is outside 1 ms..=1 h"
    );
    assert_eq!(FleetMode::from_name("fast"), None);
}
