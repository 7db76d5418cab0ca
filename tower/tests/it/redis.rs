//! The layer on a limit in a real redis-server, shared by two servers, and its fail
//! policies when the redis-server is killed mid-test.

// The redis-server the workspace's tests start and kill.
use sluicegate_test_support as redis_server;

use std::time::Duration;

use crate::common::{get, root, serve, Booked};
use http::StatusCode;
use sluicegate_core::memory::KeyedLimiter;
use sluicegate_core::{TokenBucket, SECOND};
use sluicegate_redis::{connect_async, FailPolicy, RedisLimiter};
use sluicegate_tower::{RateLimitLayer, RateLimitPolicy, RedisBackend, Wait};

const MINUTE: Duration = Duration::from_secs(60);

fn bucket(n: u64) -> TokenBucket {
    TokenBucket::new(n, n, 60 * SECOND).unwrap()
}

async fn app(
    server: &redis_server::Server,
    prefix: &str,
    n: u64,
    policy: FailPolicy<TokenBucket>,
) -> std::net::SocketAddr {
    let limiter = RedisLimiter::new(bucket(n))
        .unwrap()
        .with_prefix(prefix)
        .on_unavailable(policy);
    // A loaded machine's round trip fits in 2 s; a killed Redis refuses at once.
    let con = connect_async(server.client(), Duration::from_secs(2)).unwrap();
    let layer = RateLimitLayer::new(
        RateLimitPolicy::new("api", n, MINUTE).unwrap(),
        RedisBackend::new(limiter, con),
    );
    serve(root("ok").layer(layer)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_share_the_limit_and_follow_the_fail_policy_when_redis_dies() {
    let mut server = redis_server::Server::start();
    // Two replicas on one limit, each failing differently; a third limit fails open.
    let closed = app(&server, "rl:shared:", 3, FailPolicy::Closed).await;
    let local = app(
        &server,
        "rl:shared:",
        3,
        FailPolicy::Local(KeyedLimiter::new(bucket(2), 100)),
    )
    .await;
    let open = app(&server, "rl:open:", 1, FailPolicy::Open).await;
    let error = app(&server, "rl:error:", 1, FailPolicy::Error).await;

    let mut statuses = Vec::new();
    for addr in [closed, local, closed, local] {
        let r = get(addr, "/", &[]).await;
        statuses.push(r.status.as_u16());
        if r.status == StatusCode::TOO_MANY_REQUESTS {
            assert_eq!(r.header("ratelimit"), Some("\"api\";r=0;t=20"));
            assert_eq!(r.header("retry-after"), Some("20"));
        }
    }
    assert_eq!(
        statuses,
        [200, 200, 200, 429],
        "one limit across both replicas"
    );
    assert_eq!(get(open, "/", &[]).await.status, StatusCode::OK);
    assert_eq!(
        get(open, "/", &[]).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );

    server.kill();
    // Fail closed: 503, the limiter's fault rather than the client's quota.
    let r = get(closed, "/", &[]).await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(r.header("ratelimit"), None);
    // Reporting the error: the same 503 (unavailable, not the 500 of a failed store).
    let r = get(error, "/", &[]).await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
    // Fail open: served, with no figures to report.
    let r = get(open, "/", &[]).await;
    assert_eq!((r.status, r.header("ratelimit")), (StatusCode::OK, None));
    // The local fallback decides alone, with its own figures.
    let local_statuses: Vec<u16> = [
        get(local, "/", &[]).await,
        get(local, "/", &[]).await,
        get(local, "/", &[]).await,
    ]
    .iter()
    .map(|r| r.status.as_u16())
    .collect();
    assert_eq!(local_statuses, [200, 200, 429]);

    // Back again: Redis decides, with the state it had lost.
    server.restart();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut back = get(closed, "/", &[]).await;
    // Polled for up to 10 s: a loaded machine's reconnect; one never made fails.
    for _ in 0..100 {
        if back.status != StatusCode::SERVICE_UNAVAILABLE {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        back = get(closed, "/", &[]).await;
    }
    assert_eq!(back.status, StatusCode::OK);
    assert_eq!(back.header("ratelimit"), Some("\"api\";r=2;t=20"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_books_its_slot_in_redis() {
    let server = redis_server::Server::start();
    let limiter = RedisLimiter::new(TokenBucket::new(1, 1, SECOND / 2).unwrap())
        .unwrap()
        .with_prefix("rl:wait:");
    // A loaded machine's round trip fits in 2 s.
    let con = connect_async(server.client(), Duration::from_secs(2)).unwrap();
    let layer = RateLimitLayer::new(
        RateLimitPolicy::new("paced", 1, Duration::from_millis(500)).unwrap(),
        Booked::new(RedisBackend::new(limiter, con)),
    )
    .overload(Wait::at_most(Duration::from_millis(700)));
    let booked = layer.limiter().clone();
    let addr = serve(root("ok").layer(layer)).await;
    let start = std::time::Instant::now();
    assert_eq!(get(addr, "/", &[]).await.status, StatusCode::OK);
    assert_eq!(get(addr, "/", &[]).await.status, StatusCode::OK);
    let waited = start.elapsed();
    // The second's slot is 500 ms after the first's decision, made after `start`.
    assert!(waited >= Duration::from_millis(450), "{waited:?}");
    // Two requests at once: the second would act 1 s out, 300 ms past the bound (room
    // for it to arrive late).
    let (a, b) = tokio::join!(get(addr, "/", &[]), async {
        // Sent once the first is booked: the bookings are made in order.
        booked.until(3).await;
        get(addr, "/", &[]).await
    });
    assert_eq!((a.status.as_u16(), b.status.as_u16()), (200, 429));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_state_in_redis_is_a_500_not_a_panic_nor_an_admission() {
    let server = redis_server::Server::start();
    let addr = app(&server, "rl:corrupt:", 3, FailPolicy::Open).await;
    assert_eq!(get(addr, "/", &[]).await.status, StatusCode::OK);
    // Someone else's value where this client's state lives.
    let mut con = server.connection();
    let _: () = redis::cmd("SET")
        .arg("rl:corrupt:ip:127.0.0.1")
        .arg("garbage")
        .query(&mut con)
        .unwrap();
    let r = get(addr, "/", &[]).await;
    assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(r.body, "rate limiter failed\n");
}
