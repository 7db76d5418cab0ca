//! Decisions in Redis are coalesced: requests arriving while a pipeline is in flight go
//! together in the next one (`sluicegate_redis_pipelines_total` below
//! `sluicegate_redis_decisions_total`), and every decision is still exact, as if each had
//! been sent alone.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::common::*;
use hyper::StatusCode;
use sluicegate_server::Config;

/// A counter's value in the Prometheus text.
fn counter(metrics: &str, name: &str) -> u64 {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("{name} in {metrics}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_decisions_share_pipelines_and_stay_exact() {
    let redis = Redis::start();
    let (server, admin) = TestServer::start_with(in_redis(&redis)).await;
    let web = app(&server, &admin, "web").await;
    let policy = r#"{"algorithm":"fixed-window","limit":100,"period":"1h","apps":["web"]}"#;
    create_policy(&server, &admin, "api", policy).await;
    let url = server.url("/v1/decide");
    let first = post(&url, &web, r#"{"policy":"api","key":"hot"}"#).await;
    assert_eq!(first.json["remaining"], 99, "{}", first.text);
    // Redis paused (for less than the call timeout): 299 requests queue behind the
    // pipeline in flight, and go together once it answers.
    redis.signal("STOP");
    let asks: Vec<_> = (0..299)
        .map(|_| {
            let (url, web) = (url.clone(), web.clone());
            tokio::spawn(async move { post(&url, &web, r#"{"policy":"api","key":"hot"}"#).await })
        })
        .collect();
    // 50 ms: the queue forms in a few; the pause must end well inside the server's fixed
    // 250 ms Redis timeout (an in-flight batch timed out is sent twice), 200 ms late allowed.
    tokio::time::sleep(Duration::from_millis(50)).await;
    redis.signal("CONT");
    let mut remaining = BTreeSet::new();
    let mut denied = 0;
    for ask in asks {
        let answer = ask.await.expect("request task");
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.text);
        if answer.json["allowed"] == true {
            // Each admission saw the count the one before it left.
            let left = answer.json["remaining"].as_u64().expect("remaining");
            assert!(remaining.insert(left), "remaining {left} twice");
        } else {
            assert_eq!(answer.json["remaining"], 0);
            denied += 1;
        }
    }
    // Exactly the limit, each admission once: 98, 97, …, 0 after the first's 99.
    assert_eq!(remaining, (0..99).collect::<BTreeSet<u64>>());
    assert_eq!(denied, 200);
    let metrics = get(&server.url("/metrics"), &admin).await.text;
    let (pipelines, decisions) = (
        counter(&metrics, "sluicegate_redis_pipelines_total"),
        counter(&metrics, "sluicegate_redis_decisions_total"),
    );
    assert_eq!(decisions, 300, "{metrics}");
    assert!(
        pipelines * 4 < decisions,
        "{pipelines} pipelines for {decisions} decisions"
    );
    server.stop().await;
}

/// A request whose deadline passes while it sends its batch leaves that batch to go on
/// without it: the queue is not stuck, and the next decision is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sender_dropped_midway_leaves_the_queue_working() {
    let redis = Redis::start();
    let (server, admin) = TestServer::start_with(Config {
        timeout: Duration::from_millis(100),
        ..in_redis(&redis)
    })
    .await;
    let web = app(&server, &admin, "web").await;
    let policy = r#"{"algorithm":"fixed-window","limit":100,"period":"1h","apps":["web"]}"#;
    create_policy(&server, &admin, "api", policy).await;
    let (url, body) = (server.url("/v1/decide"), r#"{"policy":"api","key":"k"}"#);
    assert_eq!(post(&url, &web, body).await.status, StatusCode::OK);
    // Redis paused: the request sending on its own task is dropped at its deadline.
    redis.signal("STOP");
    let dropped = post(&url, &web, body).await;
    assert_eq!(
        dropped.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        dropped.text
    );
    redis.signal("CONT");
    let next = post(&url, &web, body).await;
    assert_eq!(next.status, StatusCode::OK, "{}", next.text);
    assert_eq!(next.json["remaining"], 97, "{}", next.text);
    server.stop().await;
}
