//! Rate-limiting middleware for tower HTTP services (axum, hyper) on tollgate's limiters.
//! It wraps any `Service<http::Request<B>>` whose response body can be made from `Bytes`
//! (axum's `Body`, http-body-util's `Full`), which is what its own answers (429, 400, 503)
//! need.
//!
//! A [`RateLimitLayer`] decides each request with a [`Limiter`] shared by every clone of
//! the layer and its services: in process ([`KeyedLimiter`](tollgate_core::memory::KeyedLimiter),
//! built from a [`Quota`] written as "N per period"), or, with the `redis` feature, in
//! Redis ([`RedisBackend`]) shared by replicas, following the limiter's fail policy when
//! Redis is away, or, with the `remote` feature, by a `tollgate serve` ([`Remote`]:
//! one `POST /v1/decide` per request on pooled connections). A fleet limiter plugs into
//! the same trait (a decision that may take a round trip).
//!
//! - Keys ([`KeyExtractor`]): the peer's IP, the client behind trusted proxies
//!   (`Forwarded` / `X-Forwarded-For`, read only from peers in the configured networks),
//!   a header, a path parameter, a closure; IPv6 grouped by /64. A request without a key
//!   gets 400, or shares a fallback key ([`OnBadKey`]).
//! - Every response carries `RateLimit-Policy: "name";q=100;w=60` and
//!   `RateLimit: "name";r=50;t=30` (IETF httpapi draft); a 429 carries `Retry-After` in
//!   whole seconds rounded up, never 0 and never before `t`.
//! - Denied requests: [`Reject`] (429, your body), [`Wait`] (queue on a reservation up to
//!   a bound), [`Degrade`] (a fallback service), or your own [`Overload`].
//! - [`ConcurrencyLimitLayer`]: at most N requests in flight, globally or per key, each
//!   holding a lease until its response body ends, fails or is dropped (the client left).
//! - Nothing a request carries makes it panic: bad keys are 400, an unreachable store
//!   is 503 (unless its fail policy admits or decides locally), a corrupt stored state
//!   is 500.
//!
//! ```no_run
//! use std::net::SocketAddr;
//! use std::time::Duration;
//!
//! use axum::routing::get;
//! use tollgate_tower::{KeyExtractor, Quota, RateLimitLayer, Wait};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let minute = Duration::from_secs(60);
//! // 100 a minute per client IP, behind a proxy on 10.0.0.0/8 whose headers are trusted.
//! let api = RateLimitLayer::in_process("api", Quota::per(100, minute), 100_000)?
//!     .key(KeyExtractor::forwarded(["10.0.0.0/8".parse()?]));
//! // One limit for two routes (the same layer on both), POSTs costing 5, waiting up to 2 s.
//! let heavy = RateLimitLayer::in_process("heavy", Quota::per(10, minute), 100_000)?
//!     .cost(|parts| if parts.method == http::Method::POST { 5 } else { 1 })
//!     .overload(Wait::at_most(Duration::from_secs(2)));
//! let app = axum::Router::new()
//!     .route("/api", get(|| async { "api" }).layer(api))
//!     .route("/search", get(|| async { "search" }).layer(heavy.clone()))
//!     .route("/export", get(|| async { "export" }).layer(heavy));
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
//! // Record the peer's address, which the IP keys read.
//! axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await?;
//! # Ok(())
//! # }
//! ```
#![deny(missing_docs)]

mod concurrency;
mod error;
mod headers;
mod key;
mod limiter;
mod rate_limit;
#[cfg(feature = "remote")]
mod remote;
mod response;
mod strategy;

pub use concurrency::{ConcurrencyLimit, ConcurrencyLimitLayer, LeaseBody};
pub use error::Error;
pub use headers::{Policy, MAX_NAME, RATELIMIT, RATELIMIT_POLICY};
pub use key::{Cidr, Key, KeyError, KeyExtractor, KeyFn};
#[cfg(feature = "redis")]
pub use limiter::RedisBackend;
pub use limiter::{BoxFuture, InProcess, Limiter, NoWait, Pending, Quota, Verdict};
pub use rate_limit::{OnBadKey, RateLimit, RateLimitLayer, ResponseFuture};
#[cfg(feature = "remote")]
pub use remote::{Remote, RemoteFail};
pub use strategy::{Degrade, Overload, Reject, Wait};
