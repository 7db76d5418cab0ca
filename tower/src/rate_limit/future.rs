//! The response future of [`RateLimit`](super::RateLimit): named, so the fast path (an
//! in-process admission) allocates nothing.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::Response;

use crate::headers::Stamp;
use crate::limiter::BoxFuture;
use crate::report::{Charge, ReportBody};

pin_project_lite::pin_project! {
    /// The response future of [`RateLimit`](crate::RateLimit).
    pub struct ResponseFuture<F, B, E> {
        #[pin]
        state: State<F, B, E>,
    }
}

pin_project_lite::pin_project! {
    #[project = StateProj]
    enum State<F, B, E> {
        /// Admitted in process: the inner service's future, then the headers (if any)
        /// and the report the response may owe (if counted).
        Admitted { #[pin] future: F, stamp: Option<Stamp>, charge: Option<Charge> },
        /// Anything that waits: a remote verdict, a reservation, a strategy.
        Boxed { future: BoxFuture<Result<Response<ReportBody<B>>, E>> },
        /// Answered here.
        Ready { response: Option<Response<ReportBody<B>>> },
    }
}

impl<F, B, E> std::fmt::Debug for ResponseFuture<F, B, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ResponseFuture")
    }
}

impl<F, B, E> ResponseFuture<F, B, E> {
    pub(super) fn admitted(future: F, stamp: Option<Stamp>, charge: Option<Charge>) -> Self {
        Self {
            state: State::Admitted {
                future,
                stamp,
                charge,
            },
        }
    }

    pub(super) fn boxed(future: BoxFuture<Result<Response<ReportBody<B>>, E>>) -> Self {
        Self {
            state: State::Boxed { future },
        }
    }

    pub(super) fn ready(response: Response<B>) -> Self {
        Self {
            state: State::Ready {
                response: Some(response.map(ReportBody::bare)),
            },
        }
    }
}

impl<F, B, E> Future for ResponseFuture<F, B, E>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<ReportBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProj::Admitted {
                future,
                stamp,
                charge,
            } => {
                let mut response = std::task::ready!(future.poll(cx))?;
                if let Some(stamp) = stamp {
                    stamp.apply(response.headers_mut());
                }
                Poll::Ready(Ok(settle(charge.take(), response)))
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

/// The response, owing its handler's reported cost if the request was counted.
pub(super) fn settle<B>(charge: Option<Charge>, response: Response<B>) -> Response<ReportBody<B>> {
    match charge {
        Some(charge) => charge.settle(response),
        None => response.map(ReportBody::bare),
    }
}
