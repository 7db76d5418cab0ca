//! The layer on a real axum server on loopback, driven by hyper's client.

use std::time::{Duration, Instant};

use crate::common::{self, get, root, serve, Booked};
use axum::routing::get as route;
use axum::Router;
use http::StatusCode;
use sluicegate_core::memory::KeyedLimiter;
use sluicegate_core::{FixedWindow, ManualClock, TokenBucket, SECOND};
use sluicegate_tower::{
    BoxFuture, Degrade, InProcess, Key, KeyExtractor, NoWait, OnBadKey, Overload, Quota,
    RateLimitLayer, RateLimitPolicy, Wait,
};

const MINUTE: Duration = Duration::from_secs(60);

fn per_minute(name: &str, n: u64) -> RateLimitLayer<InProcess> {
    RateLimitLayer::in_process(name, Quota::per(n, MINUTE), 1000).unwrap()
}

async fn statuses(addr: std::net::SocketAddr, path: &str, n: usize) -> Vec<u16> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(get(addr, path, &[]).await.status.as_u16());
    }
    out
}

#[tokio::test]
async fn each_route_has_its_policy_and_shared_layers_share_one_limit() {
    let shared = per_minute("shared", 3);
    let app = Router::new()
        .route("/a", route(|| async { "a" }).layer(per_minute("a", 2)))
        .route("/b", route(|| async { "b" }).layer(shared.clone()))
        .route("/c", route(|| async { "c" }).layer(shared))
        .route("/free", route(|| async { "free" }));
    let addr = serve(app).await;
    assert_eq!(statuses(addr, "/a", 3).await, [200, 200, 429]);
    assert_eq!(statuses(addr, "/b", 2).await, [200, 200]);
    // /c counts against /b's limit: one left between them.
    assert_eq!(statuses(addr, "/c", 2).await, [200, 429]);
    assert_eq!(statuses(addr, "/b", 1).await, [429]);
    assert_eq!(statuses(addr, "/free", 5).await, [200; 5]);
    let reply = get(addr, "/c", &[]).await;
    assert_eq!(
        reply.header("ratelimit-policy"),
        Some("\"shared\";q=3;w=60")
    );
    assert_eq!(reply.body, "Too Many Requests\n");
}

#[tokio::test]
async fn headers_are_the_decisions_figures_in_whole_seconds_rounded_up() {
    // 3 per minute: one token every 20 s, on a clock the test moves.
    let limiter = KeyedLimiter::with_clock(
        TokenBucket::new(3, 3, 60 * SECOND).unwrap(),
        100,
        ManualClock::new(0),
    );
    let layer = RateLimitLayer::new(RateLimitPolicy::new("api", 3, MINUTE).unwrap(), limiter)
        .legacy_headers(true);
    let clock = layer.limiter().clone();
    let addr = serve(root("ok").layer(layer)).await;
    let mut seen = Vec::new();
    for _ in 0..4 {
        let r = get(addr, "/", &[]).await;
        seen.push((
            r.status.as_u16(),
            r.header("ratelimit").unwrap().to_owned(),
            r.header("retry-after").map(str::to_owned),
        ));
        assert_eq!(r.header("ratelimit-policy"), Some("\"api\";q=3;w=60"));
    }
    let expected = |status, header: &str, retry: Option<&str>| {
        (status, header.to_owned(), retry.map(str::to_owned))
    };
    assert_eq!(
        seen,
        [
            // Admitted: r tokens left; t until the bucket is full again.
            expected(200, "\"api\";r=2;t=20", None),
            expected(200, "\"api\";r=1;t=40", None),
            expected(200, "\"api\";r=0;t=60", None),
            // Denied: the next token in 20 s; Retry-After is t.
            expected(429, "\"api\";r=0;t=20", Some("20")),
        ]
    );
    // 19.9995 s later the wait is half a millisecond: Retry-After says 1, never 0.
    clock.clock().advance(20 * SECOND - 500);
    let r = get(addr, "/", &[]).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.header("retry-after"), Some("1"));
    assert_eq!(r.header("ratelimit"), Some("\"api\";r=0;t=1"));
    assert_eq!(r.header("x-ratelimit-limit"), Some("3"));
    assert_eq!(r.header("x-ratelimit-remaining"), Some("0"));
    assert_eq!(r.header("x-ratelimit-reset"), Some("1"));
    clock.clock().advance(500);
    let r = get(addr, "/", &[]).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.header("ratelimit"), Some("\"api\";r=0;t=60"));
}

#[tokio::test]
async fn headers_off_leave_only_retry_after_on_refusals() {
    // 2 per minute, one token every 30 s, on a clock that stands still.
    let bucket = || {
        KeyedLimiter::with_clock(
            TokenBucket::new(2, 2, 60 * SECOND).unwrap(),
            100,
            ManualClock::new(0),
        )
    };
    let policy = || RateLimitPolicy::new("api", 2, MINUTE).unwrap();
    let bare = RateLimitLayer::new(policy(), bucket()).ratelimit_headers(false);
    let legacy = RateLimitLayer::new(policy(), bucket())
        .ratelimit_headers(false)
        .legacy_headers(true);
    // The slow path (a strategy that may wait) stamps its answers apart from the fast one.
    let waiting = RateLimitLayer::new(policy(), bucket())
        .ratelimit_headers(false)
        .overload(Wait::at_most(Duration::from_secs(1)));
    let app = Router::new()
        .route("/bare", route(|| async { "ok" }).layer(bare))
        .route("/legacy", route(|| async { "ok" }).layer(legacy))
        .route("/waiting", route(|| async { "ok" }).layer(waiting));
    let addr = serve(app).await;
    let names = |r: &common::Reply| {
        let mut names: Vec<String> = r
            .headers
            .keys()
            .map(|n| n.as_str().to_owned())
            .filter(|n| n.contains("ratelimit") || n == "retry-after")
            .collect();
        names.sort();
        names
    };
    let legacy_names = [
        "x-ratelimit-limit",
        "x-ratelimit-remaining",
        "x-ratelimit-reset",
    ];
    for path in ["/bare", "/legacy", "/waiting"] {
        for _ in 0..2 {
            let r = get(addr, path, &[]).await;
            assert_eq!(r.status, StatusCode::OK, "{path}");
            let expected: &[&str] = if path == "/legacy" {
                &legacy_names
            } else {
                &[]
            };
            assert_eq!(names(&r), expected, "{path}");
        }
        let r = get(addr, path, &[]).await;
        assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS, "{path}");
        // Under `Wait` the reservation says when a request may come back to wait its last
        // second: 29 s.
        let retry = if path == "/waiting" { "29" } else { "30" };
        assert_eq!(r.header("retry-after"), Some(retry), "{path}");
        let mut expected = vec!["retry-after"];
        if path == "/legacy" {
            expected.extend(legacy_names);
            assert_eq!(r.header("x-ratelimit-reset"), Some("30"));
        }
        assert_eq!(names(&r), expected, "{path}");
    }
}

#[tokio::test]
async fn forwarded_addresses_count_only_from_trusted_proxies() {
    let trusting =
        per_minute("proxied", 1).key(KeyExtractor::forwarded(["127.0.0.1".parse().unwrap()]));
    let distrusting =
        per_minute("direct", 1).key(KeyExtractor::forwarded(["10.0.0.0/8".parse().unwrap()]));
    let app = Router::new()
        .route("/behind", route(|| async { "ok" }).layer(trusting))
        .route("/direct", route(|| async { "ok" }).layer(distrusting));
    let addr = serve(app).await;
    // The peer (127.0.0.1) is not a trusted proxy: a client naming itself someone new
    // each time is still the peer.
    let a = get(addr, "/direct", &[("x-forwarded-for", "1.1.1.1")]).await;
    let b = get(
        addr,
        "/direct",
        &[("x-forwarded-for", "2.2.2.2"), ("forwarded", "for=3.3.3.3")],
    )
    .await;
    assert_eq!((a.status.as_u16(), b.status.as_u16()), (200, 429));
    // Behind the trusted proxy: each client has its own limit, read right to left, so a
    // client prepending a fake address to the chain gains nothing.
    let c = get(addr, "/behind", &[("x-forwarded-for", "1.1.1.1")]).await;
    let d = get(addr, "/behind", &[("x-forwarded-for", "2.2.2.2")]).await;
    let spoof = get(addr, "/behind", &[("x-forwarded-for", "9.9.9.9, 1.1.1.1")]).await;
    let six = get(
        addr,
        "/behind",
        &[("forwarded", "for=\"[2001:db8::1]:443\"")],
    )
    .await;
    let six_same_64 = get(addr, "/behind", &[("forwarded", "for=\"[2001:db8::2]\"")]).await;
    let statuses: Vec<u16> = [c, d, spoof, six, six_same_64]
        .iter()
        .map(|r| r.status.as_u16())
        .collect();
    assert_eq!(statuses, [200, 200, 429, 200, 429]);
    // A trusted proxy forwarding no address: 400, not a guess.
    let unknown = get(addr, "/behind", &[("forwarded", "for=unknown")]).await;
    assert_eq!(unknown.status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn missing_keys_are_refused_or_shared_as_configured_and_cost_is_priced() {
    let tenant = || KeyExtractor::header(http::HeaderName::from_static("x-tenant"));
    let strict = per_minute("strict", 10).key(tenant());
    let lenient = per_minute("lenient", 1)
        .key(tenant())
        .on_bad_key(OnBadKey::Shared(Key::Bytes("anonymous".into())));
    let priced = per_minute("priced", 10).cost(|parts| {
        parts
            .headers
            .get("x-cost")
            .and_then(|v| v.to_str().ok()?.parse().ok())
            .unwrap_or(1)
    });
    let app = Router::new()
        .route("/strict", route(|| async { "ok" }).layer(strict))
        .route("/lenient", route(|| async { "ok" }).layer(lenient))
        .route("/priced", route(|| async { "ok" }).layer(priced));
    let addr = serve(app).await;
    let r = get(addr, "/strict", &[]).await;
    assert_eq!(
        (r.status, r.body.as_str()),
        (StatusCode::BAD_REQUEST, "no usable x-tenant header\n")
    );
    assert_eq!(
        get(addr, "/strict", &[("x-tenant", "t1")]).await.status,
        StatusCode::OK
    );
    assert_eq!(statuses(addr, "/lenient", 2).await, [200, 429]);
    let r = get(addr, "/priced", &[("x-cost", "7")]).await;
    assert_eq!(r.header("ratelimit"), Some("\"priced\";r=3;t=42"));
    assert_eq!(
        get(addr, "/priced", &[("x-cost", "4")]).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        get(addr, "/priced", &[("x-cost", "3")]).await.status,
        StatusCode::OK
    );
    // A cost that can never fit: 429 without a Retry-After to obey.
    let r = get(addr, "/priced", &[("x-cost", "11")]).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.header("retry-after"), None);
}

#[tokio::test]
async fn wait_queues_on_reservations_up_to_its_bound() {
    // One at a time, one every 500 ms; wait up to 1.2 s: the fourth's slot is 300 ms past
    // the bound, room for it to arrive late on a loaded machine.
    let quota = Quota::per(1, Duration::from_millis(500));
    let layer = RateLimitLayer::new(
        RateLimitPolicy::of("paced", &quota).unwrap(),
        Booked::new(quota.in_process(10).unwrap()),
    )
    .overload(Wait::at_most(Duration::from_millis(1200)));
    let booked = layer.limiter().clone();
    let addr = serve(root("ok").layer(layer)).await;
    let start = Instant::now();
    let mut requests = Vec::new();
    for i in 0..4 {
        requests.push(tokio::spawn(async move {
            let r = get(addr, "/", &[]).await;
            (r.status.as_u16(), start.elapsed())
        }));
        // The next is sent once this one is booked: the bookings are made in order.
        booked.until(i + 1).await;
    }
    let mut replies = Vec::new();
    for request in requests {
        replies.push(request.await.unwrap());
    }
    let statuses: Vec<u16> = replies.iter().map(|r| r.0).collect();
    // Slots at 0, 500, 1000 ms; the fourth would act at 1500 ms, beyond the bound.
    assert_eq!(statuses, [200, 200, 200, 429]);
    let ms = |i: usize| replies[i].1.as_millis();
    // Measured from before the first decision: never before a slot, up to 400 ms after it
    // on a loaded machine (a slot missed is 500 ms off).
    assert!(ms(0) < 400, "{replies:?}");
    assert!((500..900).contains(&ms(1)), "{replies:?}");
    assert!((1000..1400).contains(&ms(2)), "{replies:?}");
    assert!(ms(3) < 400, "the denial is immediate: {replies:?}");
}

async fn futures_join<F: std::future::Future + Send + 'static>(
    futures: impl Iterator<Item = F>,
) -> Vec<F::Output>
where
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futures.map(tokio::spawn).collect();
    let mut out = Vec::new();
    for handle in handles {
        out.push(handle.await.unwrap());
    }
    out
}

#[tokio::test]
async fn degrade_serves_denied_requests_from_the_fallback() {
    let fallback = tower::service_fn(|_req: http::Request<axum::body::Body>| async {
        Ok::<_, std::convert::Infallible>(http::Response::new(axum::body::Body::from("cached")))
    });
    let layer = per_minute("degraded", 1).overload(Degrade::to(fallback));
    let addr = serve(root("fresh").layer(layer)).await;
    let first = get(addr, "/", &[]).await;
    let second = get(addr, "/", &[]).await;
    assert_eq!(
        (first.status, first.body.as_str()),
        (StatusCode::OK, "fresh")
    );
    assert_eq!(
        (second.status, second.body.as_str()),
        (StatusCode::OK, "cached")
    );
    // The fallback's answer still says the limit is spent; no Retry-After on a 200.
    assert_eq!(second.header("ratelimit"), Some("\"degraded\";r=0;t=60"));
    assert_eq!(second.header("retry-after"), None);
}

#[tokio::test]
async fn algorithms_without_reservations_decide_at_once_under_wait() {
    let limiter = NoWait(KeyedLimiter::new(
        FixedWindow::new(1, 60 * SECOND).unwrap(),
        10,
    ));
    let layer = RateLimitLayer::new(RateLimitPolicy::new("window", 1, MINUTE).unwrap(), limiter)
        .overload(Wait::at_most(Duration::from_secs(5)));
    let addr = serve(root("ok").layer(layer)).await;
    let start = Instant::now();
    assert_eq!(statuses(addr, "/", 2).await, [200, 429]);
    // Refused at once: 4 s of slack for a loaded machine, short of the 5 s wait's bound.
    assert!(start.elapsed() < Duration::from_secs(4));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_connections_share_one_limiter() {
    let layer = per_minute("shared", 100);
    let app = Router::new()
        .route("/one", route(|| async { "ok" }))
        .route("/two", route(|| async { "ok" }))
        .layer(layer);
    let addr = serve(app).await;
    // 40 clients, each on its own connections (so axum clones the service per
    // connection), 8 requests each over both routes.
    let clients = (0..40).map(|i| async move {
        let mut ok = 0;
        for j in 0..8 {
            let path = if (i + j) % 2 == 0 { "/one" } else { "/two" };
            let r = get(addr, path, &[]).await;
            assert!(matches!(r.status.as_u16(), 200 | 429), "{r:?}");
            ok += usize::from(r.status == StatusCode::OK);
        }
        ok
    });
    let admitted: usize = futures_join(clients).await.into_iter().sum();
    assert_eq!(admitted, 100);
}

/// A custom strategy: 503 with a JSON body naming the wait.
#[derive(Clone)]
struct Busy;

impl Overload<axum::body::Body, axum::body::Body, std::convert::Infallible> for Busy {
    fn denied(
        &self,
        _: http::Request<axum::body::Body>,
        decision: &sluicegate_core::Decision,
    ) -> BoxFuture<Result<http::Response<axum::body::Body>, std::convert::Infallible>> {
        let body = format!(
            "{{\"retry_after_us\":{}}}",
            decision.retry_after.unwrap_or(0)
        );
        let mut response = http::Response::new(axum::body::Body::from(body));
        *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
        Box::pin(async move { Ok(response) })
    }
}

#[tokio::test]
async fn custom_strategies_answer_denials_and_keep_the_headers() {
    let layer = per_minute("custom", 1).overload(Busy);
    let addr = serve(root("ok").layer(layer)).await;
    assert_eq!(get(addr, "/", &[]).await.status, StatusCode::OK);
    let r = get(addr, "/", &[]).await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
    // The next token in just under a minute, on the real clock.
    let waited: u64 = r.body["{\"retry_after_us\":".len()..r.body.len() - 1]
        .parse()
        .unwrap();
    assert!((59_000_000..=60_000_000).contains(&waited), "{}", r.body);
    assert_eq!(r.header("ratelimit"), Some("\"custom\";r=0;t=60"));
    // A 503 may say when to come back too (RFC 9110); a degraded 200 does not.
    assert_eq!(r.header("retry-after"), Some("60"));
}

/// Shadow mode: every request reaches the service with the headers as usual, the
/// would-be denials counted; nothing waits and the overload strategy is not called.
#[tokio::test]
async fn shadow_mode_always_serves_and_counts_the_would_be_denials() {
    let layer = per_minute("trial", 2).shadow(true);
    let addr = serve(root("ok").layer(layer.clone())).await;
    let mut seen = Vec::new();
    for _ in 0..4 {
        let reply = get(addr, "/", &[]).await;
        assert_eq!((reply.status, reply.body.as_str()), (StatusCode::OK, "ok"));
        assert_eq!(reply.header("retry-after"), None);
        seen.push(reply.header("ratelimit").unwrap().to_owned());
    }
    let left: Vec<bool> = seen.iter().map(|h| h.contains(";r=0;")).collect();
    assert_eq!(left, [false, true, true, true], "{seen:?}");
    assert_eq!(layer.shadow_denied(), 2);
    // A strategy that would wait or degrade does neither.
    let fallback = tower::service_fn(|_req: http::Request<axum::body::Body>| async {
        Ok::<_, std::convert::Infallible>(http::Response::new(axum::body::Body::from("cached")))
    });
    let degrading = per_minute("degraded", 1)
        .shadow(true)
        .overload(Degrade::to(fallback));
    let waiting = per_minute("waiting", 1)
        .shadow(true)
        .overload(Wait::at_most(Duration::from_secs(5)));
    for layer in [degrading.shadow_denied(), waiting.shadow_denied()] {
        assert_eq!(layer, 0);
    }
    let degrades = serve(root("fresh").layer(degrading.clone())).await;
    let waits = serve(root("fresh").layer(waiting.clone())).await;
    let start = Instant::now();
    for addr in [degrades, degrades, waits, waits] {
        let reply = get(addr, "/", &[]).await;
        assert_eq!(
            (reply.status, reply.body.as_str()),
            (StatusCode::OK, "fresh")
        );
    }
    // Not waited: 4 s for a loaded machine, short of the 5 s wait's bound.
    assert!(
        start.elapsed() < Duration::from_secs(4),
        "{:?}",
        start.elapsed()
    );
    assert_eq!((degrading.shadow_denied(), waiting.shadow_denied()), (1, 1));
}
