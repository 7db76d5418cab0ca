//! The layer: the limit's configuration, shared by every service it builds.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use http::request::Parts;
use tower_layer::Layer;

use super::config::{Config, OnBadKey, Shared};
use super::service::RateLimit;
use crate::error::Error;
use crate::headers::RateLimitPolicy;
use crate::key::KeyExtractor;
use crate::limiter::{Backend, InProcess, Quota};
use crate::strategy::Reject;

/// Limits the requests of the services it wraps. Clones share one limiter: apply the
/// same layer to several routes for one limit across them, and a layer per route for
/// separate limits.
///
/// ```
/// use std::time::Duration;
/// use sluicegate_tower::{KeyExtractor, Quota, RateLimitLayer};
///
/// // 100 requests a minute per client IP, behind a proxy on 10.0.0.0/8.
/// let layer = RateLimitLayer::in_process("api", Quota::per(100, Duration::from_secs(60)), 100_000)?
///     .key(KeyExtractor::forwarded(["10.0.0.0/8".parse()?]));
/// let app: axum::Router = axum::Router::new()
///     .route("/", axum::routing::get(|| async { "hello" }))
///     .route_layer(layer);
/// # Ok::<(), sluicegate_tower::Error>(())
/// ```
#[derive(Debug)]
pub struct RateLimitLayer<L, O = Reject> {
    shared: Arc<Shared<L, O>>,
}

impl<L, O> Clone for RateLimitLayer<L, O> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
        }
    }
}

impl RateLimitLayer<InProcess> {
    /// `quota` per client IP (the peer's address; see [`key`](Self::key)) in this
    /// process, holding at most `max_keys` clients, rejecting with 429.
    pub fn in_process(name: &str, quota: Quota, max_keys: usize) -> Result<Self, Error> {
        Ok(Self::new(
            RateLimitPolicy::of(name, &quota)?,
            quota.in_process(max_keys)?,
        ))
    }
}

impl<L: Backend> RateLimitLayer<L> {
    /// Decides with `limiter`, announcing `policy`, keyed by the peer's IP, rejecting
    /// with 429.
    pub fn new(policy: RateLimitPolicy, limiter: L) -> Self {
        Self {
            shared: Arc::new(Shared {
                limiter: Arc::new(limiter),
                config: Config::new(policy),
                overload: Reject::default(),
                shadow_denied: AtomicU64::new(0),
            }),
        }
    }
}

impl<L: Backend, O: Clone> RateLimitLayer<L, O> {
    /// This layer with `set` applied to its configuration (copied first if shared).
    fn configure(mut self, set: impl FnOnce(&mut Config)) -> Self {
        set(&mut Arc::make_mut(&mut self.shared).config);
        self
    }

    /// How each request's key is read.
    pub fn key(self, key: KeyExtractor) -> Self {
        self.configure(|config| config.key = key)
    }

    /// What a request gets when its key cannot be read.
    pub fn on_bad_key(self, choice: OnBadKey) -> Self {
        self.configure(|config| config.on_bad_key = choice)
    }

    /// Prices each request (a bulk upload costs more than a read); 1 by default.
    pub fn cost(self, cost: impl Fn(&Parts) -> u64 + Send + Sync + 'static) -> Self {
        self.configure(|config| config.cost = Some(Arc::new(cost)))
    }

    /// Whether responses carry `RateLimit-Policy` and `RateLimit` (on by default). Off,
    /// a request pays for no header it does not want; a 429 (or a strategy's 503) still
    /// says `Retry-After`, which a refused client needs to back off.
    pub fn ratelimit_headers(self, on: bool) -> Self {
        self.configure(|config| config.headers.ietf = on)
    }

    /// Also sends `X-RateLimit-Limit`, `-Remaining` and `-Reset` (seconds from now).
    pub fn legacy_headers(self, on: bool) -> Self {
        self.configure(|config| config.headers.legacy = on)
    }

    /// Shadow mode: every request reaches the service, with the rate-limit headers as
    /// usual (no `Retry-After`); the limit decides and counts as when enforcing, and a
    /// request it would have denied is counted in [`shadow_denied`](Self::shadow_denied).
    /// Nothing waits (no reservation, no pacing delay) and the overload strategy is not
    /// called: a limit is tried on live traffic before it refuses anyone.
    pub fn shadow(self, on: bool) -> Self {
        self.configure(|config| config.shadow = on)
    }

    /// How many requests shadow mode let through that the limit denied (or that an
    /// unavailable or failed limiter would have refused), across every service this
    /// layer built.
    pub fn shadow_denied(&self) -> u64 {
        self.shared.shadow_denied.load(Ordering::Relaxed)
    }

    /// What a denied request gets: [`Reject`] (the default),
    /// [`Wait`](crate::Wait), [`Degrade`](crate::Degrade) or your own [`Overload`](crate::Overload).
    pub fn overload<P>(self, overload: P) -> RateLimitLayer<L, P> {
        let Shared {
            limiter,
            config,
            shadow_denied,
            ..
        } = Arc::unwrap_or_clone(self.shared);
        RateLimitLayer {
            shared: Arc::new(Shared {
                limiter,
                config,
                overload,
                shadow_denied,
            }),
        }
    }

    /// The shared limiter.
    pub fn limiter(&self) -> &Arc<L> {
        &self.shared.limiter
    }
}

impl<S, L, O> Layer<S> for RateLimitLayer<L, O> {
    type Service = RateLimit<S, L, O>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimit::new(inner, self.shared.clone())
    }
}
