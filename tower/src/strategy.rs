//! Overload strategies (reject, wait or degrade): what happens to a request the limit refuses.
//! [`Reject`] answers 429, [`Wait`] queues up to a bound first, [`Degrade`] calls a
//! fallback service; implement [`Overload`] for anything else.

use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use sluicegate_core::Decision;
use tower_service::Service;

use crate::limiter::BoxFuture;
use crate::response::respond;

/// What a denied request gets. The middleware adds the rate-limit headers (and
/// `Retry-After` to a 429) to whatever response this returns.
pub trait Overload<ReqBody, ResBody, E>: Clone + Send + Sync + 'static {
    /// How long a request may wait for a slot before it is denied; `None` (the
    /// default) decides at once.
    fn max_wait(&self) -> Option<Duration> {
        None
    }

    /// The answer to a request the limit refused with `decision`.
    fn denied(
        &self,
        request: Request<ReqBody>,
        decision: &Decision,
    ) -> BoxFuture<Result<Response<ResBody>, E>>;
}

/// Answers 429 Too Many Requests with a fixed body.
#[derive(Debug, Clone)]
pub struct Reject {
    body: Bytes,
}

impl Default for Reject {
    fn default() -> Self {
        Self::with_body("Too Many Requests\n")
    }
}

impl Reject {
    /// A 429 with `body` (plain text unless the body's own type says otherwise).
    pub fn with_body(body: impl Into<Bytes>) -> Self {
        Self { body: body.into() }
    }

    /// The 429 response.
    pub fn response<B: From<Bytes>>(&self) -> Response<B> {
        respond(StatusCode::TOO_MANY_REQUESTS, self.body.clone())
    }
}

impl<ReqBody, ResBody, E> Overload<ReqBody, ResBody, E> for Reject
where
    ResBody: From<Bytes> + Send + 'static,
    E: Send + 'static,
{
    fn denied(&self, _: Request<ReqBody>, _: &Decision) -> BoxFuture<Result<Response<ResBody>, E>> {
        let response = self.response();
        Box::pin(std::future::ready(Ok(response)))
    }
}

/// Waits in line: books a slot up to `max_wait` ahead (the buckets' reservations: one
/// sleep, no polling) and proceeds then; a request that cannot get a slot within
/// `max_wait` gets the [`Reject`] answer. A client that disconnects while waiting gives
/// its slot up unused.
#[derive(Debug, Clone)]
pub struct Wait {
    max_wait: Duration,
    reject: Reject,
}

impl Wait {
    /// Waits at most `max_wait`, then answers 429.
    pub fn at_most(max_wait: Duration) -> Self {
        Self {
            max_wait,
            reject: Reject::default(),
        }
    }

    /// The answer when no slot is free within the wait.
    pub fn or_reject(mut self, reject: Reject) -> Self {
        self.reject = reject;
        self
    }
}

impl<ReqBody, ResBody, E> Overload<ReqBody, ResBody, E> for Wait
where
    ResBody: From<Bytes> + Send + 'static,
    E: Send + 'static,
{
    fn max_wait(&self) -> Option<Duration> {
        Some(self.max_wait)
    }

    fn denied(
        &self,
        request: Request<ReqBody>,
        decision: &Decision,
    ) -> BoxFuture<Result<Response<ResBody>, E>> {
        Overload::<ReqBody, ResBody, E>::denied(&self.reject, request, decision)
    }
}

/// Degrades: a denied request is served by `fallback` (a cached page, a cheaper
/// handler) instead.
#[derive(Debug, Clone)]
pub struct Degrade<F> {
    fallback: F,
}

impl<F> Degrade<F> {
    /// Sends denied requests to `fallback`.
    pub fn to(fallback: F) -> Self {
        Self { fallback }
    }
}

impl<F, ReqBody, ResBody, E> Overload<ReqBody, ResBody, E> for Degrade<F>
where
    F: Service<Request<ReqBody>, Response = Response<ResBody>, Error = E>
        + Clone
        + Send
        + Sync
        + 'static,
    F::Future: Send + 'static,
    ReqBody: Send + 'static,
    E: Send + 'static,
{
    fn denied(
        &self,
        request: Request<ReqBody>,
        _: &Decision,
    ) -> BoxFuture<Result<Response<ResBody>, E>> {
        let mut fallback = self.fallback.clone();
        Box::pin(async move {
            std::future::poll_fn(|cx: &mut Context<'_>| -> Poll<Result<(), E>> {
                fallback.poll_ready(cx)
            })
            .await?;
            fallback.call(request).await
        })
    }
}
