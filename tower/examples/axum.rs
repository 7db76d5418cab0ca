//! An axum server with per-route limits, per client IP: 5 a minute on `/api` (then 429);
//! one limit of 60 a minute, at most 2 at once, shared by `/search` and `/export`, where
//! requests wait in line up to 2 s; 1 a minute on `/report`, which then degrades to a
//! cached answer. It calls itself to show the headers, then keeps serving:
//!
//! ```text
//! cargo run -p sluicegate-tower --example axum            # then: curl -i localhost:3000/api
//! cargo run -p sluicegate-tower --example axum -- --once  # the demonstration alone
//! ```

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use axum::body::Body;
use axum::routing::get;
use axum::Router;
use http::{Request, Response};
use http_body_util::BodyExt;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use sluicegate_tower::{Degrade, KeyExtractor, Quota, RateLimitLayer, Wait};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let minute = Duration::from_secs(60);
    // Trust forwarding headers only from a proxy on loopback (say, nginx in front).
    let clients =
        || KeyExtractor::forwarded(["127.0.0.1".parse().unwrap(), "::1".parse().unwrap()]);
    let api = RateLimitLayer::in_process("api", Quota::per(5, minute), 100_000)?.key(clients());
    let heavy = RateLimitLayer::in_process("heavy", Quota::per(60, minute).burst(2), 100_000)?
        .key(clients())
        .overload(Wait::at_most(Duration::from_secs(2)));
    let cached = tower::service_fn(|_: Request<Body>| async {
        Ok::<_, Infallible>(Response::new(Body::from("yesterday's report (cached)\n")))
    });
    let report = RateLimitLayer::in_process("report", Quota::per(1, minute), 100_000)?
        .key(clients())
        .overload(Degrade::to(cached));

    let app = Router::new()
        .route("/api", get(|| async { "hello\n" }).layer(api))
        .route(
            "/search",
            get(|| async { "results\n" }).layer(heavy.clone()),
        )
        .route("/export", get(|| async { "export\n" }).layer(heavy))
        .route(
            "/report",
            get(|| async { "today's report\n" }).layer(report),
        );

    let listener = match tokio::net::TcpListener::bind("127.0.0.1:3000").await {
        Ok(listener) => listener,
        // Port 3000 taken: any free one.
        Err(_) => tokio::net::TcpListener::bind("127.0.0.1:0").await?,
    };
    let addr = listener.local_addr()?;
    let server = tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
    });
    println!("serving on http://{addr}");

    let client = Client::builder(TokioExecutor::new()).build_http::<Body>();
    let start = std::time::Instant::now();
    for path in ["/api"; 6]
        .into_iter()
        .chain(["/search", "/export", "/search", "/report", "/report"])
    {
        let response = client.get(format!("http://{addr}{path}").parse()?).await?;
        let header = |name| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("-")
                .to_owned()
        };
        let (status, limit, retry) = (
            response.status().to_string(),
            header("ratelimit"),
            header("retry-after"),
        );
        let body = response.into_body().collect().await?.to_bytes();
        println!(
            "{:>5} ms  GET {path:8} {status:22} RateLimit: {limit:22} Retry-After: {retry:3} {}",
            start.elapsed().as_millis(),
            String::from_utf8_lossy(&body).trim_end()
        );
    }

    if std::env::args().any(|a| a == "--once") {
        return Ok(());
    }
    println!("try: curl -i http://{addr}/api   (Ctrl-C to stop)");
    server.await??;
    Ok(())
}
