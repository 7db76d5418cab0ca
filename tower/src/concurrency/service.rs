//! The service: each request waits for a lease (or gets the strategy's answer), and its
//! response body holds the lease.

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use sluicegate_core::memory::{AcquireError, KeyedLeases};
use sluicegate_core::{Decision, Ticks};
use tower_service::Service;

use super::body::LeaseBody;
use crate::headers::retry_seconds;
use crate::key::{Key, KeyExtractor};
use crate::limiter::BoxFuture;
use crate::response::respond;
use crate::strategy::{Overload, Reject};

/// The key every request shares under a global limit.
const GLOBAL: Key = Key::Bytes(Bytes::from_static(b""));

/// What a layer and its services share: the lease table (shared with the guards of the
/// response bodies in flight), how requests are keyed, the leases' ttl, the strategy.
#[derive(Debug, Clone)]
pub(super) struct Limits<O> {
    pub(super) leases: Arc<KeyedLeases<Key>>,
    pub(super) key: Option<KeyExtractor>,
    pub(super) ttl: Ticks,
    pub(super) overload: O,
}

/// The service [`ConcurrencyLimitLayer`](crate::ConcurrencyLimitLayer) builds.
#[derive(Debug, Clone)]
pub struct ConcurrencyLimit<S, O = Reject> {
    pub(super) inner: S,
    pub(super) limits: Limits<O>,
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
        let (key, request) = match &self.limits.key {
            None => (GLOBAL, request),
            Some(extractor) => {
                let (parts, body) = request.into_parts();
                match extractor.extract(&parts) {
                    Ok(key) => (key, Request::from_parts(parts, body)),
                    Err(error) => {
                        let body = Bytes::from(format!("{error}\n"));
                        let response = respond(StatusCode::BAD_REQUEST, body);
                        return Box::pin(std::future::ready(Ok(response.map(LeaseBody::bare))));
                    }
                }
            }
        };
        // The service made ready is the one that serves (a fresh clone stays behind).
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let (leases, ttl, overload) = (
            Arc::clone(&self.limits.leases),
            self.limits.ttl,
            self.limits.overload.clone(),
        );
        let max = leases.concurrency().max();
        Box::pin(async move {
            let max_wait = overload.max_wait().unwrap_or(Duration::ZERO);
            // Dropping this future (the client gone while waiting) gives up the wait.
            let denied = match leases.acquire_owned_async(&key, None, ttl, max_wait).await {
                Ok(guard) => {
                    let response = inner.call(request).await?;
                    return Ok(response.map(|body| LeaseBody::new(body, Some(guard))));
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
            Ok(response.map(LeaseBody::bare))
        })
    }
}
