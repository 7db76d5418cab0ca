//! The middleware's overhead per request: one axum route alone (`bare`), behind
//! tollgate's layer, and behind tower_governor's, each limiting per client IP with a
//! limit that never denies, called in process with `ServiceExt::oneshot` (no sockets).
//! The figure that matters is the added time: `tollgate - bare` against
//! `tower_governor - bare`.
//!
//! Both layers read the peer from axum's `ConnectInfo`, over 256 client addresses in
//! turn. tower_governor runs with its defaults (no headers, governor's TSC clock);
//! tollgate always writes `RateLimit-Policy` and `RateLimit`.

use std::hint::black_box;
use std::net::SocketAddr;
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::routing::get;
use axum::Router;
use criterion::{criterion_group, criterion_main, Criterion};
use axum::http::Request;
use tollgate_tower::{Quota, RateLimitLayer};
use tower::ServiceExt;
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::GovernorLayer;

const CLIENTS: u32 = 256;

fn route() -> Router {
    Router::new().route("/", get(|| async { "ok" }))
}

fn request(i: u32) -> Request<Body> {
    let mut request = Request::get("/").body(Body::empty()).unwrap();
    let ip = [10, 0, 0, (i % CLIENTS) as u8];
    request
        .extensions_mut()
        .insert(ConnectInfo(SocketAddr::from((ip, 4000))));
    request
}

fn tower_overhead(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    // A billion a second per client: never denies.
    let tollgate = RateLimitLayer::in_process(
        "bench",
        Quota::per(1_000_000_000, Duration::from_secs(1)),
        10_000,
    )
    .unwrap();
    let governor = GovernorConfigBuilder::default()
        .per_nanosecond(1)
        .burst_size(1_000_000_000)
        .finish()
        .unwrap();
    let apps = [
        ("bare", route()),
        ("tollgate", route().route_layer(tollgate)),
        ("tower_governor", route().route_layer(GovernorLayer::new(governor))),
    ];
    let mut group = c.benchmark_group("tower_overhead");
    for (name, app) in apps {
        // Every app answers 200 before it is measured.
        let status = runtime.block_on(app.clone().oneshot(request(0))).unwrap().status();
        assert_eq!(status, 200, "{name}");
        let mut i = 0u32;
        group.bench_function(name, |b| {
            b.iter(|| {
                i = i.wrapping_add(1);
                let response = runtime.block_on(app.clone().oneshot(request(i)));
                black_box(response.unwrap().status())
            })
        });
    }
    group.finish();
}

criterion_group!(benches, tower_overhead);
criterion_main!(benches);
