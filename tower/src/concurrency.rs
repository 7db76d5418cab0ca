//! The concurrency limit: at most N requests in flight, each holding a lease until its
//! response body ends.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use tollgate_core::memory::{AcquireError, KeyedLeases, LeaseGuard};
use tollgate_core::{Concurrency, Decision, LeaseError, Ticks};
use tower_layer::Layer;
use tower_service::Service;

use crate::headers::retry_seconds;
use crate::limiter::{ticks, BoxFuture};
use crate::service::respond;
use crate::strategy::{Overload, Reject};
use crate::{Error, Key, KeyExtractor};

type Table = KeyedLeases<Key>;

/// The key every request shares under a global limit.
const GLOBAL: Key = Key::Bytes(Bytes::from_static(b""));

/// Limits the requests in flight, globally or per key: each request holds a lease from
/// when it is admitted until its response body ends, fails or is dropped (the client
/// went away). A lease a request never gives back (a stuck handler, a body polled
/// forever) returns after `ttl`, so `ttl` should exceed the longest response.
///
/// A request over the limit gets the [`Overload`] strategy: [`Reject`] (429 with
/// `Retry-After` until the earliest lease expires), [`Wait`](crate::Wait) (waits up to
/// its bound for a release, woken by it, then rejects), or your own.
///
/// The lease table is shared by the layer's clones and the guards of the response
/// bodies in flight, and freed with the last of them.
///
/// ```
/// use std::time::Duration;
/// use axum::routing::get;
/// use tollgate_tower::{ConcurrencyLimitLayer, KeyExtractor, Wait};
///
/// // At most 64 exports in flight per client IP, waiting up to 5 s for a slot; a request
/// // that never finishes frees its slot after 10 minutes.
/// let exports = ConcurrencyLimitLayer::per_key(64, Duration::from_secs(600), KeyExtractor::peer_ip(), 100_000)?
///     .overload(Wait::at_most(Duration::from_secs(5)));
/// // At most 200 requests in flight across the whole app.
/// let app: axum::Router = axum::Router::new()
///     .route("/export", get(|| async { "export" }).layer(exports))
///     .layer(ConcurrencyLimitLayer::global(200, Duration::from_secs(60))?);
/// # Ok::<(), tollgate_tower::Error>(())
/// ```
#[derive(Debug)]
pub struct ConcurrencyLimitLayer<O = Reject> {
    leases: Arc<Table>,
    key: Option<KeyExtractor>,
    ttl: Ticks,
    overload: O,
}

impl<O: Clone> Clone for ConcurrencyLimitLayer<O> {
    fn clone(&self) -> Self {
        Self {
            leases: Arc::clone(&self.leases),
            key: self.key.clone(),
            ttl: self.ttl,
            overload: self.overload.clone(),
        }
    }
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
        let table = KeyedLeases::new(concurrency, max_keys);
        Ok(Self {
            leases: Arc::new(table),
            key,
            ttl,
            overload: Reject::default(),
        })
    }
}

impl<O> ConcurrencyLimitLayer<O> {
    /// What a request over the limit gets: [`Reject`] (the default), [`Wait`](crate::Wait)
    /// or your own [`Overload`].
    pub fn overload<P>(self, overload: P) -> ConcurrencyLimitLayer<P> {
        ConcurrencyLimitLayer {
            leases: self.leases,
            key: self.key,
            ttl: self.ttl,
            overload,
        }
    }

    /// The lease table (to inspect what is held).
    pub fn leases(&self) -> &KeyedLeases<Key> {
        &self.leases
    }
}

impl<S, O: Clone> Layer<S> for ConcurrencyLimitLayer<O> {
    type Service = ConcurrencyLimit<S, O>;

    fn layer(&self, inner: S) -> Self::Service {
        ConcurrencyLimit {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service [`ConcurrencyLimitLayer`] builds.
#[derive(Debug)]
pub struct ConcurrencyLimit<S, O = Reject> {
    inner: S,
    layer: ConcurrencyLimitLayer<O>,
}

impl<S: Clone, O: Clone> Clone for ConcurrencyLimit<S, O> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            layer: self.layer.clone(),
        }
    }
}

impl<S, O, ReqBody, ResBody> Service<Request<ReqBody>> for ConcurrencyLimit<S, O>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    O: Overload<ReqBody, ResBody, S::Error>,
    ReqBody: Send + 'static,
    ResBody: From<Bytes> + Send + 'static,
{
    type Response = Response<LeaseBody<ResBody>>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let (key, request) = match &self.layer.key {
            None => (GLOBAL, request),
            Some(extractor) => {
                let (parts, body) = request.into_parts();
                match extractor.extract(&parts) {
                    Ok(key) => (key, Request::from_parts(parts, body)),
                    Err(error) => {
                        let body = Bytes::from(format!("{error}\n"));
                        let response = respond(StatusCode::BAD_REQUEST, body);
                        return Box::pin(std::future::ready(Ok(response.map(LeaseBody::unleased))));
                    }
                }
            }
        };
        // The service made ready is the one that serves (a fresh clone stays behind).
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let (leases, ttl, overload) = (
            Arc::clone(&self.layer.leases),
            self.layer.ttl,
            self.layer.overload.clone(),
        );
        let max = leases.concurrency().max();
        Box::pin(async move {
            let max_wait = overload.max_wait().unwrap_or(Duration::ZERO);
            // Dropping this future (the client gone while waiting) gives up the wait.
            let denied = match leases.acquire_owned_async(&key, None, ttl, max_wait).await {
                Ok(guard) => {
                    let response = inner.call(request).await?;
                    return Ok(response.map(|body| LeaseBody::leased(body, guard)));
                }
                Err(AcquireError::Busy(decision)) => decision,
                // The owner is made here and the ttl checked when the layer was built:
                // only a key out of fencing tokens, refused with no time to retry.
                Err(_) => Decision::deny(max, 0, None, 0),
            };
            let mut response = overload.denied(request, &denied).await?;
            let refusal = matches!(
                response.status(),
                StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE
            );
            if refusal && !response.headers().contains_key(http::header::RETRY_AFTER) {
                if let Some(seconds) = retry_seconds(&denied) {
                    response
                        .headers_mut()
                        .insert(http::header::RETRY_AFTER, seconds.into());
                }
            }
            Ok(response.map(LeaseBody::unleased))
        })
    }
}

pin_project_lite::pin_project! {
    /// A response body holding its request's lease: the lease is released when the body
    /// ends, fails, or is dropped unfinished (the client disconnected).
    pub struct LeaseBody<B> {
        #[pin]
        inner: B,
        guard: Option<LeaseGuard<'static, Key>>,
    }
}

impl<B> std::fmt::Debug for LeaseBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseBody")
            .field("leased", &self.guard.is_some())
            .finish_non_exhaustive()
    }
}

impl<B> LeaseBody<B> {
    fn leased(inner: B, guard: LeaseGuard<'static, Key>) -> Self {
        Self {
            inner,
            guard: Some(guard),
        }
    }

    /// A body holding no lease (answers made here or by the overload strategy).
    fn unleased(inner: B) -> Self {
        Self { inner, guard: None }
    }
}

impl<B: Body> Body for LeaseBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        let this = self.project();
        let frame = std::task::ready!(this.inner.poll_frame(cx));
        if !matches!(frame, Some(Ok(_))) {
            // The end or an error: nothing more is sent for this request.
            this.guard.take();
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
