//! The concurrency limit on a real axum server on loopback, driven by hyper's client.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use crate::common::{self, client, get};
use axum::body::Body;
use axum::routing::get as route;
use axum::Router;
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body::Frame;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use sluicegate_tower::{ConcurrencyLimitLayer, Key, KeyExtractor, Wait};
use tokio::sync::mpsc;
use tower::ServiceExt;

const TTL: Duration = Duration::from_secs(30);

/// Leases held on the global limit's table now.
fn held(layer: &ConcurrencyLimitLayer) -> usize {
    held_on(layer, &Key::Bytes(Bytes::new()))
}

fn held_on(layer: &ConcurrencyLimitLayer, key: &Key) -> usize {
    layer.leases().state(key).map_or(0, |s| s.leases().len())
}

/// Waits 5 s or more (500 polls) for the held count to become `n`: room for a loaded machine.
async fn until_held(layer: &ConcurrencyLimitLayer, n: usize) {
    for _ in 0..500 {
        if held(layer) == n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{} leases held, expected {n}", held(layer));
}

/// A body whose chunks (or error) the test sends.
struct Channel(mpsc::Receiver<Result<Bytes, &'static str>>);

impl http_body::Body for Channel {
    type Data = Bytes;
    type Error = &'static str;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        self.0
            .poll_recv(cx)
            .map(|chunk| chunk.map(|c| c.map(Frame::data)))
    }
}

/// What feeds a streaming body.
type Sender = mpsc::Sender<Result<Bytes, &'static str>>;
type Senders = mpsc::UnboundedReceiver<Sender>;

/// An app whose `/stream` answers with a body fed by a sender it hands to the test, and
/// whose `/` answers at once.
fn streaming() -> (Router, Senders) {
    let (senders, handed) = mpsc::unbounded_channel();
    let app = Router::new()
        .route(
            "/stream",
            route(move || {
                let senders = senders.clone();
                async move {
                    let (tx, rx) = mpsc::channel(1);
                    senders.send(tx).unwrap();
                    Body::new(Channel(rx))
                }
            }),
        )
        .route("/", route(|| async { "ok" }));
    (app, handed)
}

/// Serves `streaming()` behind `layer`.
async fn serve_streaming(layer: ConcurrencyLimitLayer) -> (SocketAddr, Senders) {
    let (app, handed) = streaming();
    (common::serve(app.layer(layer)).await, handed)
}

/// Opens `/stream` with `headers` and returns its response once the headers have arrived.
async fn open(addr: SocketAddr, headers: &[(&str, &str)]) -> Response<Incoming> {
    let mut request = Request::get(format!("http://{addr}/stream"));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request.body(Body::empty()).unwrap();
    client(false).request(request).await.unwrap()
}

/// A global limit of one over `streaming()` with one `/stream` open: the layer, the
/// address, the response (its headers arrived) and the sender feeding its body.
async fn one_open_stream() -> (
    ConcurrencyLimitLayer,
    SocketAddr,
    Response<Incoming>,
    Sender,
) {
    let layer = ConcurrencyLimitLayer::global(1, TTL).unwrap();
    let (addr, mut handed) = serve_streaming(layer.clone()).await;
    let response = open(addr, &[]).await;
    let tx = handed.recv().await.unwrap();
    (layer, addr, response, tx)
}

#[tokio::test]
async fn never_more_than_n_in_flight() {
    let (now, peak) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (n, p) = (now.clone(), peak.clone());
    let layer = ConcurrencyLimitLayer::global(3, TTL)
        .unwrap()
        .overload(Wait::at_most(Duration::from_secs(10)));
    let app = Router::new()
        .route(
            "/",
            route(move || {
                let (now, peak) = (n.clone(), p.clone());
                async move {
                    let in_flight = now.fetch_add(1, Ordering::SeqCst) + 1;
                    peak.fetch_max(in_flight, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(30)).await;
                    now.fetch_sub(1, Ordering::SeqCst);
                    "ok"
                }
            }),
        )
        .layer(layer);
    let addr = common::serve(app).await;
    let calls: Vec<_> = (0..24)
        .map(|_| tokio::spawn(async move { get(addr, "/", &[]).await.status }))
        .collect();
    for call in calls {
        // Every request waited for a lease and was served.
        assert_eq!(call.await.unwrap(), StatusCode::OK);
    }
    assert_eq!(peak.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn the_lease_is_held_until_a_streaming_body_ends() {
    let (layer, addr, mut response, tx) = one_open_stream().await;
    tx.send(Ok(Bytes::from_static(b"first"))).await.unwrap();
    let frame = response.body_mut().frame().await.unwrap().unwrap();
    assert_eq!(frame.into_data().unwrap(), "first");
    // The handler has returned, but its body is still being sent: the lease is held.
    assert_eq!(held(&layer), 1);
    let refused = get(addr, "/", &[]).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    // Retry-After: until the lease expires at the latest (its ttl, 30 s).
    assert_eq!(refused.header("retry-after"), Some("30"));
    drop(tx);
    let rest = response.into_body().collect().await.unwrap().to_bytes();
    assert!(rest.is_empty());
    until_held(&layer, 0).await;
    assert_eq!(get(addr, "/", &[]).await.status, StatusCode::OK);
}

#[tokio::test]
async fn the_lease_is_released_when_the_client_disconnects_mid_body() {
    let (layer, addr, mut response, tx) = one_open_stream().await;
    tx.send(Ok(Bytes::from_static(b"first"))).await.unwrap();
    response.body_mut().frame().await.unwrap().unwrap();
    assert_eq!(held(&layer), 1);
    // The client goes away with the body unfinished (its connection is not pooled).
    drop(response);
    // The server notices when it next writes; the body is dropped and the send fails.
    let mut sent = 0;
    while tx.send(Ok(Bytes::from_static(b"more"))).await.is_ok() {
        sent += 1;
        // 5 s or more of writes: a loaded machine's notice; one never made fails.
        assert!(sent < 500, "the body was never dropped");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(held(&layer), 0);
    assert_eq!(get(addr, "/", &[]).await.status, StatusCode::OK);
}

#[tokio::test]
async fn the_lease_is_released_when_the_body_fails() {
    let (layer, addr, response, tx) = one_open_stream().await;
    tx.send(Err("broken")).await.unwrap();
    assert!(response.into_body().collect().await.is_err());
    until_held(&layer, 0).await;
    // The sender is still alive: the error released the lease, not the body's end.
    drop(tx);
    assert_eq!(get(addr, "/", &[]).await.status, StatusCode::OK);
}

#[tokio::test]
async fn the_lease_is_released_when_the_handler_fails() {
    let layer = ConcurrencyLimitLayer::global(1, TTL).unwrap();
    // A handler answering an error status, then an inner service failing outright.
    let app = Router::new()
        .route(
            "/",
            route(|| async { Err::<&str, _>(StatusCode::INTERNAL_SERVER_ERROR) }),
        )
        .layer(layer.clone());
    let addr = common::serve(app).await;
    for _ in 0..3 {
        assert_eq!(
            get(addr, "/", &[]).await.status,
            StatusCode::INTERNAL_SERVER_ERROR
        );
        until_held(&layer, 0).await;
    }
    let failing = tower::service_fn(|_: Request<Body>| async { Err::<Response<Body>, _>("boom") });
    let service = tower_layer::Layer::layer(&layer, failing);
    assert_eq!(
        service
            .oneshot(Request::new(Body::empty()))
            .await
            .unwrap_err(),
        "boom"
    );
    assert_eq!(held(&layer), 0);
}

#[tokio::test]
async fn per_key_limits_are_separate() {
    let layer = ConcurrencyLimitLayer::per_key(
        1,
        TTL,
        KeyExtractor::header(http::HeaderName::from_static("x-user")),
        100,
    )
    .unwrap();
    let (addr, mut handed) = serve_streaming(layer.clone()).await;
    let response = open(addr, &[("x-user", "alice")]).await;
    let tx = handed.recv().await.unwrap();
    let alice = Key::Bytes(Bytes::from_static(b"alice"));
    assert_eq!(held_on(&layer, &alice), 1);
    let status = |user| async move { get(addr, "/", &[("x-user", user)]).await.status };
    assert_eq!(status("alice").await, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(status("bob").await, StatusCode::OK);
    assert_eq!(get(addr, "/", &[]).await.status, StatusCode::BAD_REQUEST);
    drop(tx);
    response.into_body().collect().await.unwrap();
    assert_eq!(status("alice").await, StatusCode::OK);
}

#[tokio::test]
async fn wait_is_woken_by_a_release_and_bounded() {
    let layer = ConcurrencyLimitLayer::global(1, TTL)
        .unwrap()
        .overload(Wait::at_most(Duration::from_secs(1)));
    let (app, mut handed) = streaming();
    let addr = common::serve(app.layer(layer)).await;
    let response = open(addr, &[]).await;
    let tx = handed.recv().await.unwrap();
    // Held throughout the wait: refused once the bound has passed.
    let started = std::time::Instant::now();
    let refused = get(addr, "/", &[]).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(started.elapsed() >= Duration::from_secs(1));
    // Released during the wait: the waiter proceeds at once, not at the bound.
    let waiter = tokio::spawn(async move { get(addr, "/", &[]).await.status });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let started = std::time::Instant::now();
    drop(tx);
    response.into_body().collect().await.unwrap();
    assert_eq!(waiter.await.unwrap(), StatusCode::OK);
    // 700 ms late allowed on a loaded machine, still before the waiter's 1 s bound.
    assert!(started.elapsed() < Duration::from_millis(700));
}

#[tokio::test]
async fn a_stuck_request_frees_its_slot_after_the_ttl() {
    let layer = ConcurrencyLimitLayer::global(1, Duration::from_millis(200)).unwrap();
    let (addr, mut handed) = serve_streaming(layer.clone()).await;
    // A body that never ends.
    let _stuck = open(addr, &[]).await;
    let _tx = handed.recv().await.unwrap();
    let refused = get(addr, "/", &[]).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    // A sub-second wait is never `Retry-After: 0`.
    assert_eq!(refused.header("retry-after"), Some("1"));
    tokio::time::sleep(Duration::from_millis(250)).await;
    assert_eq!(get(addr, "/", &[]).await.status, StatusCode::OK);
}

#[test]
fn limits_and_ttls_out_of_range_are_refused_when_built() {
    assert!(ConcurrencyLimitLayer::global(0, TTL).is_err());
    assert!(ConcurrencyLimitLayer::global(1, Duration::ZERO).is_err());
    assert!(ConcurrencyLimitLayer::global(1, Duration::from_secs(400 * 86_400)).is_err());
    assert!(ConcurrencyLimitLayer::global(1_024, TTL).is_ok());
}

#[test]
fn building_a_layer_takes_no_lease() {
    // The ttl is checked without a trial lease: a new table holds no key, no token spent.
    let layer = ConcurrencyLimitLayer::global(1, TTL).unwrap();
    assert!(layer.leases().is_empty());
}
