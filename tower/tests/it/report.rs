//! Costs reported after the response (`ReportedCost`), on a real axum server on loopback.

use std::net::{IpAddr, Ipv4Addr};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use crate::common::{get, serve};
use axum::body::Body;
use axum::response::{IntoResponse, Response};
use axum::routing::get as route;
use axum::Router;
use bytes::Bytes;
use http::StatusCode;
use http_body::Frame;
use sluicegate_core::memory::KeyedLimiter;
use sluicegate_core::{TokenBucket, SECOND};
use sluicegate_tower::{Key, RateLimitLayer, RateLimitPolicy, ReportedCost, Reporting};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

type Backend = Reporting<KeyedLimiter<Key, TokenBucket>>;

const LOOPBACK: Key = Key::Ip(IpAddr::V4(Ipv4Addr::LOCALHOST));

/// 10 units a minute per client, which reports may take up to 100 into debt; each
/// request decided at `estimate`.
fn layer(estimate: u64) -> RateLimitLayer<Backend> {
    let bucket = TokenBucket::new(10, 10, 60 * SECOND)
        .unwrap()
        .with_overdraft(100)
        .unwrap();
    let policy = RateLimitPolicy::new("tokens", 10, Duration::from_secs(60)).unwrap();
    RateLimitLayer::new(policy, Reporting(KeyedLimiter::new(bucket, 100))).cost(move |_| estimate)
}

/// A response whose handler reports `actual` units.
fn reported(actual: u64) -> Response {
    let mut response = "done".into_response();
    response.extensions_mut().insert(ReportedCost(actual));
    response
}

/// Waits (at most 5 s) until the loopback client's remaining units are `remaining`
/// (0 while in debt), which a report makes true once its response body is done.
async fn until_remaining(layer: &RateLimitLayer<Backend>, remaining: u64) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let now = layer.limiter().0.check(&LOOPBACK, 0);
        if now.remaining == remaining {
            return;
        }
        assert!(Instant::now() < deadline, "still {now:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_cost_beyond_the_estimate_takes_the_key_into_debt() {
    let layer = layer(1);
    let app = Router::new()
        .route("/", route(|| async { reported(30) }))
        .layer(layer.clone());
    let addr = serve(app).await;
    assert_eq!(get(addr, "/", &[]).await.status, StatusCode::OK);
    // 10 − 1 decided − 29 reported: 20 in debt.
    until_remaining(&layer, 0).await;
    assert!(!layer.limiter().0.check(&LOOPBACK, 0).allowed);
    let next = get(addr, "/", &[]).await;
    assert_eq!(next.status, StatusCode::TOO_MANY_REQUESTS);
}

#[tokio::test]
async fn a_cost_below_the_estimate_gives_units_back() {
    let layer = layer(6);
    let app = Router::new()
        .route("/cheap", route(|| async { reported(0) }))
        .route("/unreported", route(|| async { "done" }))
        .layer(layer.clone());
    let addr = serve(app).await;
    assert_eq!(get(addr, "/cheap", &[]).await.status, StatusCode::OK);
    // Decided at 6, refunded 6: all 10 left, again and again.
    until_remaining(&layer, 10).await;
    assert_eq!(get(addr, "/cheap", &[]).await.status, StatusCode::OK);
    until_remaining(&layer, 10).await;
    // Without a report the estimate stays charged: 4 left, where 6 do not fit.
    assert_eq!(get(addr, "/unreported", &[]).await.status, StatusCode::OK);
    assert_eq!(layer.limiter().0.check(&LOOPBACK, 0).remaining, 4);
    let refused = get(addr, "/unreported", &[]).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
}

/// A body sending a chunk every 10 ms, never ending.
struct Endless(tokio::time::Interval);

impl http_body::Body for Endless {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        std::task::ready!(self.0.poll_tick(cx));
        Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"token ")))))
    }
}

#[tokio::test]
async fn a_client_gone_mid_body_is_still_charged() {
    let layer = layer(1);
    let app = Router::new()
        .route(
            "/stream",
            route(|| async {
                let body = Body::new(Endless(tokio::time::interval(Duration::from_millis(10))));
                let mut response = body.into_response();
                response.extensions_mut().insert(ReportedCost(50));
                response
            }),
        )
        .layer(layer.clone());
    let addr = serve(app).await;
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(b"GET /stream HTTP/1.1\r\nhost: test\r\n\r\n")
        .await
        .unwrap();
    let mut head = [0; 256];
    let read = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut head))
        .await
        .unwrap()
        .unwrap();
    assert!(head[..read].starts_with(b"HTTP/1.1 200"));
    // Mid-body: decided at 1, nothing reported yet.
    assert_eq!(layer.limiter().0.check(&LOOPBACK, 0).remaining, 9);
    drop(stream);
    // 10 − 1 − 49: in debt once the server drops the body.
    until_remaining(&layer, 0).await;
    assert!(!layer.limiter().0.check(&LOOPBACK, 0).allowed);
}
