//! The layer: the lease table and its settings, shared by every service it builds.

use std::sync::Arc;
use std::time::Duration;

use sluicegate_core::memory::KeyedLeases;
use sluicegate_core::{Concurrency, LeaseError};
use tower_layer::Layer;

use super::service::{ConcurrencyLimit, Limits};
use crate::error::Error;
use crate::key::{Key, KeyExtractor};
use crate::limiter::ticks;
use crate::strategy::Reject;

/// Limits the requests in flight, globally or per key: each request holds a lease from
/// when it is admitted until its response body ends, fails or is dropped (the client
/// went away). A lease a request never gives back (a stuck handler, a body polled
/// forever) returns after `ttl`, so `ttl` should exceed the longest response.
///
/// A request over the limit gets the [`Overload`](crate::Overload) strategy: [`Reject`] (429 with
/// `Retry-After` until the earliest lease expires), [`Wait`](crate::Wait) (waits up to
/// its bound for a release, woken by it, then rejects), or your own.
///
/// The lease table is shared by the layer's clones and the guards of the response
/// bodies in flight, and freed with the last of them.
///
/// ```
/// use std::time::Duration;
/// use axum::routing::get;
/// use sluicegate_tower::{ConcurrencyLimitLayer, KeyExtractor, Wait};
///
/// // At most 64 exports in flight per client IP, waiting up to 5 s for a slot; a request
/// // that never finishes frees its slot after 10 minutes.
/// let exports = ConcurrencyLimitLayer::per_key(64, Duration::from_secs(600), KeyExtractor::peer_ip(), 100_000)?
///     .overload(Wait::at_most(Duration::from_secs(5)));
/// // At most 200 requests in flight across the whole app.
/// let app: axum::Router = axum::Router::new()
///     .route("/export", get(|| async { "export" }).layer(exports))
///     .layer(ConcurrencyLimitLayer::global(200, Duration::from_secs(60))?);
/// # Ok::<(), sluicegate_tower::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct ConcurrencyLimitLayer<O = Reject> {
    limits: Limits<O>,
}

impl ConcurrencyLimitLayer {
    /// At most `max` requests in flight across every route the layer (or a clone of it)
    /// wraps, each lease returning after `ttl` at the latest.
    pub fn global(max: u64, ttl: Duration) -> Result<Self, Error> {
        Self::build(max, ttl, None, 1)
    }

    /// At most `max` requests in flight per key, holding at most `max_keys` keys (a key
    /// is dropped once nothing holds it; a table full of keys in use answers a new key
    /// as over the limit).
    pub fn per_key(
        max: u64,
        ttl: Duration,
        key: KeyExtractor,
        max_keys: usize,
    ) -> Result<Self, Error> {
        Self::build(max, ttl, Some(key), max_keys)
    }

    fn build(
        max: u64,
        ttl: Duration,
        key: Option<KeyExtractor>,
        max_keys: usize,
    ) -> Result<Self, Error> {
        let concurrency = Concurrency::new(max)?;
        let ttl = ticks(ttl);
        // The ttl's range is checked here rather than on each request (every request's
        // owner is made by the table, always valid).
        if let Err(LeaseError::Param(error)) = Concurrency::check(b"-", ttl) {
            return Err(error.into());
        }
        Ok(Self {
            limits: Limits {
                leases: Arc::new(KeyedLeases::new(concurrency, max_keys)),
                key,
                ttl,
                overload: Reject::default(),
            },
        })
    }
}

impl<O> ConcurrencyLimitLayer<O> {
    /// What a request over the limit gets: [`Reject`] (the default), [`Wait`](crate::Wait)
    /// or your own [`Overload`](crate::Overload).
    pub fn overload<P>(self, overload: P) -> ConcurrencyLimitLayer<P> {
        let Limits {
            leases, key, ttl, ..
        } = self.limits;
        ConcurrencyLimitLayer {
            limits: Limits {
                leases,
                key,
                ttl,
                overload,
            },
        }
    }

    /// The lease table (to inspect what is held).
    pub fn leases(&self) -> &KeyedLeases<Key> {
        &self.limits.leases
    }
}

impl<S, O: Clone> Layer<S> for ConcurrencyLimitLayer<O> {
    type Service = ConcurrencyLimit<S, O>;

    fn layer(&self, inner: S) -> Self::Service {
        ConcurrencyLimit {
            inner,
            limits: self.limits.clone(),
        }
    }
}
