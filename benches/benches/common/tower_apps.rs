//! The apps of the `tower_overhead` bench, shared with the `tower_instructions` example
//! that counts their instructions.

use std::net::SocketAddr;
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::Request;
use axum::routing::get;
use axum::Router;
use tollgate_tower::{Quota, RateLimitLayer};
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::GovernorLayer;

const CLIENTS: u32 = 256;

fn route() -> Router {
    Router::new().route("/", get(|| async { "ok" }))
}

/// The `i`th request: `GET /` from one of 256 client addresses in turn.
pub fn request(i: u32) -> Request<Body> {
    let mut request = Request::get("/").body(Body::empty()).unwrap();
    let ip = [10, 0, 0, u8::try_from(i % CLIENTS).unwrap()];
    request
        .extensions_mut()
        .insert(ConnectInfo(SocketAddr::from((ip, 4000))));
    request
}

/// The route alone, behind tollgate's layer, behind tower_governor's without and with
/// its headers; every limit per client IP and never denying.
pub fn apps() -> [(&'static str, Router); 4] {
    // A billion a second per client.
    let tollgate = RateLimitLayer::in_process(
        "bench",
        Quota::per(1_000_000_000, Duration::from_secs(1)),
        10_000,
    )
    .unwrap();
    let governor = || {
        let mut config = GovernorConfigBuilder::default();
        config.per_nanosecond(1).burst_size(1_000_000_000);
        config
    };
    let plain = governor().finish().unwrap();
    let headers = governor().use_headers().finish().unwrap();
    [
        ("bare", route()),
        ("tollgate", route().route_layer(tollgate)),
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
