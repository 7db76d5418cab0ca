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

use crate::headers::{Headers, Stamp};
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
    headers: Headers,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("policy", &self.policy)
            .field("key", &self.key)
            .field("cost", &self.cost.as_ref().map(|_| "closure"))
            .field("on_bad_key", &self.on_bad_key)
            .field("headers", &self.headers)
            .finish()
    }
}

impl Config {
    fn stamp<B>(&self, response: &mut Response<B>, decision: &Decision) {
        let status = response.status();
        self.policy
            .stamp_with(response.headers_mut(), status, decision, self.headers);
    }
}

/// What the layer and its services share: one `Arc`, so cloning either (axum does per
/// request) is one reference count.
#[derive(Debug)]
struct Shared<L, O> {
    limiter: Arc<L>,
    config: Config,
    overload: O,
}

impl<L, O: Clone> Clone for Shared<L, O> {
    fn clone(&self) -> Self {
        Self {
            limiter: self.limiter.clone(),
            config: self.config.clone(),
            overload: self.overload.clone(),
        }
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
            shared: Arc::new(Shared {
                limiter: Arc::new(limiter),
                config: Config {
                    policy,
                    key: KeyExtractor::peer_ip(),
                    cost: None,
                    on_bad_key: OnBadKey::Reject,
                    headers: Headers {
                        ietf: true,
                        legacy: false,
                    },
                },
                overload: Reject::default(),
            }),
        }
    }
}

impl<L: Limiter, O: Clone> RateLimitLayer<L, O> {
    fn config(&mut self) -> &mut Config {
        &mut Arc::make_mut(&mut self.shared).config
    }

    /// How each request's key is read.
    pub fn key(mut self, key: KeyExtractor) -> Self {
        self.config().key = key;
        self
    }

    /// What a request gets when its key cannot be read.
    pub fn on_bad_key(mut self, choice: OnBadKey) -> Self {
        self.config().on_bad_key = choice;
        self
    }

    /// Prices each request (a bulk upload costs more than a read); 1 by default.
    pub fn cost(mut self, cost: impl Fn(&Parts) -> u64 + Send + Sync + 'static) -> Self {
        self.config().cost = Some(Arc::new(cost));
        self
    }

    /// Whether responses carry `RateLimit-Policy` and `RateLimit` (on by default). Off,
    /// a request pays for no header it does not want; a 429 (or a strategy's 503) still
    /// says `Retry-After`, which a refused client needs to back off.
    pub fn ratelimit_headers(mut self, on: bool) -> Self {
        self.config().headers.ietf = on;
        self
    }

    /// Also sends `X-RateLimit-Limit`, `-Remaining` and `-Reset` (seconds from now).
    pub fn legacy_headers(mut self, on: bool) -> Self {
        self.config().headers.legacy = on;
        self
    }

    /// What a denied request gets: [`Reject`](crate::Reject) (the default),
    /// [`Wait`](crate::Wait), [`Degrade`](crate::Degrade) or your own [`Overload`].
    pub fn overload<P>(self, overload: P) -> RateLimitLayer<L, P> {
        let Shared {
            limiter, config, ..
        } = Arc::unwrap_or_clone(self.shared);
        RateLimitLayer {
            shared: Arc::new(Shared {
                limiter,
                config,
                overload,
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
        RateLimit {
            inner,
            shared: self.shared.clone(),
        }
    }
}

/// The service [`RateLimitLayer`] builds. Readiness is the inner service's; each request
/// is then decided by the shared limiter.
#[derive(Debug)]
pub struct RateLimit<S, L, O = Reject> {
    inner: S,
    shared: Arc<Shared<L, O>>,
}

impl<S: Clone, L, O> Clone for RateLimit<S, L, O> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            shared: self.shared.clone(),
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

    fn call(&mut self, mut request: Request<ReqBody>) -> Self::Future {
        let Shared {
            limiter,
            config,
            overload,
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
        let pending = match overload.max_wait() {
            Some(max_wait) => limiter.reserve(&key, cost, max_wait),
            None => limiter.check(&key, cost),
        };
        match pending {
            // The fast path: decided in process, admitted at once.
            Pending::Ready(Verdict::Decided(decision))
                if decision.allowed && decision.delay == 0 =>
            {
                let future = self.inner.call(request);
                if config.headers.any() {
                    let stamp = Stamp::new(&config.policy, &decision, config.headers);
                    ResponseFuture::stamped(future, stamp)
                } else {
                    ResponseFuture::passthrough(future)
                }
            }
            pending => {
                // The ready service goes with this request; a fresh clone waits for the next.
                let clone = self.inner.clone();
                let inner = std::mem::replace(&mut self.inner, clone);
                let future = decide(pending, inner, request, self.shared.clone());
                ResponseFuture::boxed(Box::pin(future))
            }
        }
    }
}

/// The slow path: waits for the verdict (and a reservation's slot), then answers.
async fn decide<S, L, O, ReqBody, ResBody>(
    pending: Pending,
    mut inner: S,
    request: Request<ReqBody>,
    shared: Arc<Shared<L, O>>,
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
                shared.overload.denied(request, &decision).await?
            };
            shared.config.stamp(&mut response, &decision);
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
        Stamped { #[pin] future: F, stamp: Stamp },
        /// Admitted in process, no headers to write: the inner service's future alone.
        Passthrough { #[pin] future: F },
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
    fn stamped(future: F, stamp: Stamp) -> Self {
        Self {
            state: State::Stamped { future, stamp },
        }
    }

    fn passthrough(future: F) -> Self {
        Self {
            state: State::Passthrough { future },
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
            StateProj::Passthrough { future } => future.poll(cx),
            StateProj::Stamped { future, stamp } => {
                let mut response = std::task::ready!(future.poll(cx))?;
                stamp.apply(response.headers_mut());
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
