//! `/readyz` against a real PostgreSQL store and a real Redis: 503 naming what it waits
//! for soon after either goes away (or hangs), 200 again soon after its return (a probe's
//! worst case is 700 ms; the tests allow a loaded machine 5 s); `/healthz` answers
//! throughout.

use std::time::{Duration, Instant};

use crate::common::*;
use hyper::StatusCode;
use sluicegate_core::FailPolicy;
use sluicegate_server::Config;

/// How long `/readyz` took to answer `want` (status and what it waits for), measured
/// from `since`; fails past ten seconds.
async fn flips(server: &TestServer, since: Instant, want: (StatusCode, &[&str])) -> Duration {
    let held = eventually(Duration::from_secs(10), || async {
        let answer = get(&server.url("/readyz"), "").await;
        let body: serde_json::Value = serde_json::from_str(&answer.text).unwrap_or_default();
        let waiting: Vec<&str> = body["waiting_for"]
            .as_array()
            .map(|a| a.iter().filter_map(|v| v.as_str()).collect())
            .unwrap_or_default();
        answer.status == want.0 && body["ready"] == (want.0 == StatusCode::OK) && waiting == want.1
    })
    .await;
    assert!(held, "/readyz never answered {want:?}");
    since.elapsed()
}

/// One way a part goes away and comes back: what it is, what `/readyz` waits for then,
/// how it goes down and how it comes up.
type Outage<T> = (&'static str, &'static str, fn(&mut T), fn(&mut T));

/// Takes `part` down and up again as `outage` says: `/readyz` names what it waits for
/// within 5 s, and is ready within 5 s of its return.
async fn outage<T>(server: &TestServer, part: &mut T, outage: Outage<T>) {
    let (what, waiting, down, up) = outage;
    down(part);
    let gone = flips(
        server,
        Instant::now(),
        (StatusCode::SERVICE_UNAVAILABLE, &[waiting]),
    )
    .await;
    assert_eq!(
        get(&server.url("/healthz"), "").await.status,
        StatusCode::OK
    );
    up(part);
    let back = flips(server, Instant::now(), (StatusCode::OK, &[])).await;
    println!("{what}: not ready after {gone:?}, ready again after {back:?}");
    // A probe (reused 200 ms, timed out at 500 ms) late by 4.3 s; a stale answer never flips.
    assert!(gone < Duration::from_secs(5) && back < Duration::from_secs(5));
}

/// Runs one command on `redis`.
fn redis_cmd(redis: &mut Redis, args: &[&str]) {
    let mut cmd = redis::cmd(args[0]);
    cmd.arg(&args[1..]);
    cmd.query::<()>(&mut redis.connection()).expect(args[0]);
}

/// Sets `maxmemory` (no eviction: a write past it is refused with OOM).
fn maxmemory(redis: &mut Redis, bytes: &str) {
    redis_cmd(redis, &["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    redis_cmd(redis, &["CONFIG", "SET", "maxmemory", bytes]);
}

/// Makes `redis` a replica of a server that is not there: it answers writes `READONLY`,
/// as a primary demoted by a failover does.
fn demote(redis: &mut Redis) {
    let nowhere = free_port().to_string();
    redis_cmd(redis, &["REPLICAOF", "127.0.0.1", &nowhere]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_follows_the_store_and_redis() {
    let mut pg = Postgres::start();
    let mut redis = Redis::start();
    let server = TestServer::with(Config {
        store: Some(pg.url()),
        fail: FailPolicy::Error,
        ..in_redis(&redis)
    })
    .await;
    flips(&server, Instant::now(), (StatusCode::OK, &[])).await;
    let redis_outages: [Outage<Redis>; 4] = [
        ("Redis killed", "decisions", Redis::kill, Redis::restart),
        // A Redis that accepts and never answers is not ready either.
        ("Redis paused", "decisions", |r| r.pause(), |r| r.resume()),
        // Nor one that answers PING but refuses every decision's write.
        (
            "Redis at maxmemory",
            "decisions",
            |r| maxmemory(r, "1"),
            |r| maxmemory(r, "0"),
        ),
        ("Redis demoted", "decisions", demote, |r| {
            redis_cmd(r, &["REPLICAOF", "NO", "ONE"])
        }),
    ];
    for redis_outage in redis_outages {
        outage(&server, &mut redis, redis_outage).await;
    }
    let stopped: Outage<Postgres> = (
        "PostgreSQL stopped",
        "store",
        |pg| pg.kill(),
        |pg| pg.restart(),
    );
    outage(&server, &mut pg, stopped).await;
    server.stop().await;
}

/// Under `--fail open` every decision is answered while Redis is away: still ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fail_policy_that_answers_keeps_the_server_ready() {
    let mut redis = Redis::start();
    let (server, _admin) = TestServer::start_with(Config {
        fail: FailPolicy::Open,
        ..in_redis(&redis)
    })
    .await;
    redis.kill();
    // Past a probe's reuse and its timeout.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let answer = get(&server.url("/readyz"), "").await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.text);
    server.stop().await;
}
