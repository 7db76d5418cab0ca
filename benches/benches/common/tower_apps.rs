//! The apps of the `tower_overhead` bench, shared with the `tower_instructions` example
//! that counts their instructions.

use std::net::SocketAddr;
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::Request;
use axum::routing::get;
use axum::Router;
use sluicegate_tower::{Key, Quota, RateLimitLayer};
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::GovernorLayer;

const CLIENTS: u32 = 256;

fn route() -> Router {
    Router::new().route("/", get(|| async { "ok" }))
}

/// A billion a second per client: never denies.
fn quota() -> Quota {
    Quota::per(1_000_000_000, Duration::from_secs(1))
}

/// The `i`th client of 256.
fn client(i: u32) -> [u8; 4] {
    [10, 0, 0, u8::try_from(i % CLIENTS).unwrap()]
}

/// The `i`th request: `GET /` from one of 256 client addresses in turn.
pub fn request(i: u32) -> Request<Body> {
    let mut request = Request::get("/").body(Body::empty()).unwrap();
    request
        .extensions_mut()
        .insert(ConnectInfo(SocketAddr::from((client(i), 4000))));
    request
}

/// The `sluicegate` app's decision alone: its in-process limiter asked for the `i`th
/// client, which the layer's time includes (priced apart, since the limiter and the
/// layer are sped up separately).
pub fn decision() -> impl FnMut(u32) -> bool {
    let limiter = quota().in_process(10_000).unwrap();
    move |i| limiter.check(&Key::Ip(client(i).into()), 1).allowed
}

/// The route alone, behind sluicegate's layer with its headers (the default) and without,
/// behind tower_governor's without (its default) and with its headers; every limit per
/// client IP and never denying.
pub fn apps() -> [(&'static str, Router); 5] {
    let sluicegate = RateLimitLayer::in_process("bench", quota(), 10_000).unwrap();
    let sluicegate_no_headers = RateLimitLayer::in_process("bench", quota(), 10_000)
        .unwrap()
        .ratelimit_headers(false);
    let governor = || {
        let mut config = GovernorConfigBuilder::default();
        config.per_nanosecond(1).burst_size(1_000_000_000);
        config
    };
    let plain = governor().finish().unwrap();
    let headers = governor().use_headers().finish().unwrap();
    [
        ("bare", route()),
        ("sluicegate", route().route_layer(sluicegate)),
        (
            "sluicegate_no_headers",
            route().route_layer(sluicegate_no_headers),
        ),
        (
            "tower_governor",
            route().route_layer(GovernorLayer::new(plain)),
        ),
        (
            "tower_governor_headers",
            route().route_layer(GovernorLayer::new(headers)),
        ),
    ]
}
