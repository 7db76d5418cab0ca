//! The layer, its service and the service's response future.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::request::Parts;
use http::{HeaderValue, Request, Response, StatusCode};
use tollgate_core::Decision;
use tower_layer::Layer;
use tower_service::Service;

use crate::limiter::{BoxFuture, Limiter, Pending, Verdict};
use crate::strategy::{Overload, Reject};
use crate::{Error, InProcess, Key, KeyExtractor, Policy, Quota};

/// A closure pricing a request (1 unless set).
type CostFn = Arc<dyn Fn(&Parts) -> u64 + Send + Sync>;

/// What a request whose key cannot be read gets.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum OnBadKey {
    /// 400 Bad Request, saying why (the default: a request the limit cannot attribute
    /// is not served unlimited).
    Reject,
    /// Counted against this one shared key: all such requests share a limit.
    Shared(Key),
}

/// Everything but the limiter and the strategy, shared by every clone.
#[derive(Clone)]
struct Config {
    policy: Policy,
    key: KeyExtractor,
    cost: Option<CostFn>,
    on_bad_key: OnBadKey,
    legacy: bool,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("policy", &self.policy)
            .field("key", &self.key)
            .field("cost", &self.cost.as_ref().map(|_| "closure"))
            .field("on_bad_key", &self.on_bad_key)
            .field("legacy", &self.legacy)
            .finish()
    }
}

impl Config {
    fn stamp<B>(&self, response: &mut Response<B>, decision: &Decision) {
        let status = response.status();
        self.policy
            .stamp(response.headers_mut(), status, decision, self.legacy);
    }
}

/// Limits the requests of the services it wraps. Clones share one limiter: apply the
/// same layer to several routes for one limit across them, and a layer per route for
/// separate limits.
///
/// ```
/// use std::time::Duration;
/// use tollgate_tower::{KeyExtractor, Quota, RateLimitLayer};
///
/// // 100 requests a minute per client IP, behind a proxy on 10.0.0.0/8.
/// let layer = RateLimitLayer::in_process("api", Quota::per(100, Duration::from_secs(60)), 100_000)?
///     .key(KeyExtractor::forwarded(["10.0.0.0/8".parse()?]));
/// let app: axum::Router = axum::Router::new()
///     .route("/", axum::routing::get(|| async { "hello" }))
///     .route_layer(layer);
/// # Ok::<(), tollgate_tower::Error>(())
/// ```
#[derive(Debug)]
pub struct RateLimitLayer<L, O = Reject> {
    limiter: Arc<L>,
    config: Arc<Config>,
    overload: O,
}

impl<L, O: Clone> Clone for RateLimitLayer<L, O> {
    fn clone(&self) -> Self {
        Self {
            limiter: self.limiter.clone(),
            config: self.config.clone(),
            overload: self.overload.clone(),
        }
    }
}

impl RateLimitLayer<InProcess> {
    /// `quota` per client IP (the peer's address; see [`key`](Self::key)) in this
    /// process, holding at most `max_keys` clients, rejecting with 429.
    pub fn in_process(name: &str, quota: Quota, max_keys: usize) -> Result<Self, Error> {
        Ok(Self::new(
            Policy::of(name, &quota)?,
            quota.in_process(max_keys)?,
        ))
    }
}

impl<L: Limiter> RateLimitLayer<L> {
    /// Decides with `limiter`, announcing `policy`, keyed by the peer's IP, rejecting
    /// with 429.
    pub fn new(policy: Policy, limiter: L) -> Self {
        Self {
            limiter: Arc::new(limiter),
            config: Arc::new(Config {
                policy,
                key: KeyExtractor::peer_ip(),
                cost: None,
                on_bad_key: OnBadKey::Reject,
                legacy: false,
            }),
            overload: Reject::default(),
        }
    }
}

impl<L: Limiter, O> RateLimitLayer<L, O> {
    /// How each request's key is read.
    pub fn key(mut self, key: KeyExtractor) -> Self {
        Arc::make_mut(&mut self.config).key = key;
        self
    }

    /// What a request gets when its key cannot be read.
    pub fn on_bad_key(mut self, choice: OnBadKey) -> Self {
        Arc::make_mut(&mut self.config).on_bad_key = choice;
        self
    }

    /// Prices each request (a bulk upload costs more than a read); 1 by default.
    pub fn cost(mut self, cost: impl Fn(&Parts) -> u64 + Send + Sync + 'static) -> Self {
        Arc::make_mut(&mut self.config).cost = Some(Arc::new(cost));
        self
    }

    /// Also sends `X-RateLimit-Limit`, `-Remaining` and `-Reset` (seconds from now).
    pub fn legacy_headers(mut self, on: bool) -> Self {
        Arc::make_mut(&mut self.config).legacy = on;
        self
    }

    /// What a denied request gets: [`Reject`](crate::Reject) (the default),
    /// [`Wait`](crate::Wait), [`Degrade`](crate::Degrade) or your own [`Overload`].
    pub fn overload<P>(self, overload: P) -> RateLimitLayer<L, P> {
        RateLimitLayer {
            limiter: self.limiter,
            config: self.config,
            overload,
        }
    }

    /// The shared limiter.
    pub fn limiter(&self) -> &Arc<L> {
        &self.limiter
    }
}

impl<S, L, O: Clone> Layer<S> for RateLimitLayer<L, O> {
    type Service = RateLimit<S, L, O>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimit {
            inner,
            limiter: self.limiter.clone(),
            config: self.config.clone(),
            overload: self.overload.clone(),
        }
    }
}

/// The service [`RateLimitLayer`] builds. Readiness is the inner service's; each request
/// is then decided by the shared limiter.
#[derive(Debug)]
pub struct RateLimit<S, L, O = Reject> {
    inner: S,
    limiter: Arc<L>,
    config: Arc<Config>,
    overload: O,
}

impl<S: Clone, L, O: Clone> Clone for RateLimit<S, L, O> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            limiter: self.limiter.clone(),
            config: self.config.clone(),
            overload: self.overload.clone(),
        }
    }
}

/// A response built here (429, 400, 500, 503): plain text.
pub(crate) fn respond<B: From<Bytes>>(status: StatusCode, body: Bytes) -> Response<B> {
    let mut response = Response::new(B::from(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

impl<S, L, O, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimit<S, L, O>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    L: Limiter,
    O: Overload<ReqBody, ResBody, S::Error>,
    ReqBody: Send + 'static,
    ResBody: From<Bytes> + Send + 'static,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, ResBody, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let config = &self.config;
        // Split the request only for closures, which read its `Parts`.
        let (key, cost, request) = match (config.key.extract_request(&request), &config.cost) {
            (Some(key), None) => (key, 1, request),
            (key, cost) => {
                let (parts, body) = request.into_parts();
                let key = key.unwrap_or_else(|| config.key.extract(&parts));
                let cost = cost.as_ref().map_or(1, |price| price(&parts));
                (key, cost, Request::from_parts(parts, body))
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
        let pending = match self.overload.max_wait() {
            Some(max_wait) => self.limiter.reserve(&key, cost, max_wait),
            None => self.limiter.check(&key, cost),
        };
        match pending {
            // The fast path: decided in process, admitted at once.
            Pending::Ready(Verdict::Decided(decision))
                if decision.allowed && decision.delay == 0 =>
            {
                ResponseFuture::inner(self.inner.call(request), decision, config.clone())
            }
            pending => {
                // The ready service goes with this request; a fresh clone waits for the next.
                let clone = self.inner.clone();
                let inner = std::mem::replace(&mut self.inner, clone);
                let overload = self.overload.clone();
                let future = decide(pending, inner, request, overload, config.clone());
                ResponseFuture::boxed(Box::pin(future))
            }
        }
    }
}

/// The slow path: waits for the verdict (and a reservation's slot), then answers.
async fn decide<S, O, ReqBody, ResBody>(
    pending: Pending,
    mut inner: S,
    request: Request<ReqBody>,
    overload: O,
    config: Arc<Config>,
) -> Result<Response<ResBody>, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    O: Overload<ReqBody, ResBody, S::Error>,
    ResBody: From<Bytes>,
{
    match pending.resolve().await {
        Verdict::Decided(decision) => {
            let mut response = if decision.allowed {
                if decision.delay > 0 {
                    tokio::time::sleep(Duration::from_micros(decision.delay)).await;
                }
                inner.call(request).await?
            } else {
                overload.denied(request, &decision).await?
            };
            config.stamp(&mut response, &decision);
            Ok(response)
        }
        Verdict::Open => inner.call(request).await,
        Verdict::Closed => Ok(respond(
            StatusCode::SERVICE_UNAVAILABLE,
            Bytes::from_static(b"rate limiter unavailable\n"),
        )),
        Verdict::Failed(_) => Ok(respond(
            StatusCode::INTERNAL_SERVER_ERROR,
            Bytes::from_static(b"rate limiter failed\n"),
        )),
    }
}

pin_project_lite::pin_project! {
    /// The response future of [`RateLimit`].
    pub struct ResponseFuture<F, B, E> {
        #[pin]
        state: State<F, B, E>,
    }
}

pin_project_lite::pin_project! {
    #[project = StateProj]
    enum State<F, B, E> {
        /// Admitted in process: the inner service's future, then the headers.
        Inner { #[pin] future: F, decision: Decision, config: Arc<Config> },
        /// Anything that waits: a remote verdict, a reservation, a strategy.
        Boxed { future: BoxFuture<Result<Response<B>, E>> },
        /// Answered here.
        Ready { response: Option<Response<B>> },
    }
}

impl<F, B, E> std::fmt::Debug for ResponseFuture<F, B, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ResponseFuture")
    }
}

impl<F, B, E> ResponseFuture<F, B, E> {
    fn inner(future: F, decision: Decision, config: Arc<Config>) -> Self {
        Self {
            state: State::Inner {
                future,
                decision,
                config,
            },
        }
    }

    fn boxed(future: BoxFuture<Result<Response<B>, E>>) -> Self {
        Self {
            state: State::Boxed { future },
        }
    }

    fn ready(response: Response<B>) -> Self {
        Self {
            state: State::Ready {
                response: Some(response),
            },
        }
    }
}

impl<F, B, E> Future for ResponseFuture<F, B, E>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<B>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProj::Inner {
                future,
                decision,
                config,
            } => {
                let mut response = std::task::ready!(future.poll(cx))?;
                config.stamp(&mut response, decision);
                Poll::Ready(Ok(response))
            }
            StateProj::Boxed { future } => future.as_mut().poll(cx),
            StateProj::Ready { response } => match response.take() {
                Some(response) => Poll::Ready(Ok(response)),
                // Polled after completion: tower's contract forbids it; stay pending
                // rather than panic.
                None => Poll::Pending,
            },
        }
    }
}
