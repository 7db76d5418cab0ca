//! The response future of [`RateLimit`](super::RateLimit): named, so the fast path (an
//! in-process admission) allocates nothing.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::Response;

use crate::headers::Stamp;
use crate::limiter::BoxFuture;

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
    pub(super) fn stamped(future: F, stamp: Stamp) -> Self {
        Self {
            state: State::Stamped { future, stamp },
        }
    }

    pub(super) fn passthrough(future: F) -> Self {
        Self {
            state: State::Passthrough { future },
        }
    }

    pub(super) fn boxed(future: BoxFuture<Result<Response<B>, E>>) -> Self {
        Self {
            state: State::Boxed { future },
        }
    }

    pub(super) fn ready(response: Response<B>) -> Self {
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
