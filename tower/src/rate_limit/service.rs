//! The service: decides each request, at once when the limiter is in process and
//! admits, otherwise in a boxed future that waits for the verdict.

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use tower_service::Service;

use super::config::{OnBadKey, Shared};
use super::future::{settle, ResponseFuture};
use crate::headers::Stamp;
use crate::limiter::{Backend, Pending, Verdict};
use crate::report::{Charge, ReportBody};
use crate::response::respond;
use crate::strategy::{Overload, Reject};

/// The service [`RateLimitLayer`](crate::RateLimitLayer) builds. Readiness is the inner
/// service's; each request is then decided by the shared limiter.
#[derive(Debug)]
pub struct RateLimit<S, L, O = Reject> {
    inner: S,
    shared: Arc<Shared<L, O>>,
}

impl<S, L, O> RateLimit<S, L, O> {
    pub(super) fn new(inner: S, shared: Arc<Shared<L, O>>) -> Self {
        Self { inner, shared }
    }
}

impl<S: Clone, L, O> Clone for RateLimit<S, L, O> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            shared: self.shared.clone(),
        }
    }
}

impl<S, L, O, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimit<S, L, O>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    L: Backend,
    O: Overload<ReqBody, ResBody, S::Error>,
    ReqBody: Send + 'static,
    ResBody: From<Bytes> + Send + 'static,
{
    type Response = Response<ReportBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, ResBody, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<ReqBody>) -> Self::Future {
        let Shared {
            limiter,
            config,
            overload,
            ..
        } = &*self.shared;
        // The request is split only for closures, which read its `Parts`.
        let (key, cost) = match (config.key.extract_request(&request), &config.cost) {
            (Some(key), None) => (key, 1),
            (key, cost) => {
                let (parts, body) = request.into_parts();
                let key = key.unwrap_or_else(|| config.key.extract(&parts));
                let cost = cost.as_ref().map_or(1, |price| price(&parts));
                request = Request::from_parts(parts, body);
                (key, cost)
            }
        };
        let key = match key {
            Ok(key) => key,
            Err(error) => match &config.on_bad_key {
                OnBadKey::Shared(key) => key.clone(),
                OnBadKey::Reject => {
                    let body = Bytes::from(format!("{error}\n"));
                    return ResponseFuture::ready(respond(StatusCode::BAD_REQUEST, body));
                }
            },
        };
        // Shadow mode never waits: no reservation.
        let pending = match overload.max_wait() {
            Some(max_wait) if !config.shadow => limiter.reserve(&key, cost, max_wait),
            _ => limiter.check(&key, cost),
        };
        // What the response owes if its handler reports the actual cost.
        let charge = Charge::new(limiter.clone(), key, cost);
        match pending {
            // The fast path: decided in process, admitted at once.
            Pending::Ready(Verdict::Decided(decision))
                if decision.delay == 0 && self.shared.passes(decision.allowed) =>
            {
                let future = self.inner.call(request);
                let stamp = config
                    .headers
                    .any()
                    .then(|| Stamp::new(&config.policy, &decision, config.headers));
                // A request shadow mode let through was not counted: nothing to settle.
                ResponseFuture::admitted(future, stamp, decision.allowed.then_some(charge))
            }
            pending => {
                // The ready service goes with this request; a fresh clone waits for the next.
                let clone = self.inner.clone();
                let inner = std::mem::replace(&mut self.inner, clone);
                let future = decide(pending, inner, request, self.shared.clone(), charge);
                ResponseFuture::boxed(Box::pin(future))
            }
        }
    }
}

/// The slow path: waits for the verdict (and a reservation's slot), then answers; a
/// response to a counted request owes its reported cost (`charge`).
async fn decide<S, L, O, ReqBody, ResBody>(
    pending: Pending,
    mut inner: S,
    request: Request<ReqBody>,
    shared: Arc<Shared<L, O>>,
    charge: Charge,
) -> Result<Response<ReportBody<ResBody>>, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    O: Overload<ReqBody, ResBody, S::Error>,
    ResBody: From<Bytes>,
{
    let shadow = shared.config.shadow;
    let response = match pending.resolve().await {
        Verdict::Decided(decision) => {
            let (mut response, charge) = if shared.passes(decision.allowed) {
                if decision.delay > 0 && !shadow {
                    tokio::time::sleep(Duration::from_micros(decision.delay)).await;
                }
                let counted = decision.allowed.then_some(charge);
                (inner.call(request).await?, counted)
            } else {
                (shared.overload.denied(request, &decision).await?, None)
            };
            shared.config.stamp(&mut response, &decision);
            return Ok(settle(charge, response));
        }
        Verdict::Open => inner.call(request).await?,
        Verdict::Closed | Verdict::Failed(_) if shared.passes(false) => inner.call(request).await?,
        Verdict::Closed => respond(
            StatusCode::SERVICE_UNAVAILABLE,
            Bytes::from_static(b"rate limiter unavailable\n"),
        ),
        Verdict::Failed(_) => respond(
            StatusCode::INTERNAL_SERVER_ERROR,
            Bytes::from_static(b"rate limiter failed\n"),
        ),
    };
    // Not counted by the limiter: nothing to settle.
    Ok(response.map(ReportBody::bare))
}
