//! The response body that holds its request's lease until it ends.

use std::pin::Pin;
use std::task::{Context, Poll};

use http_body::{Body, Frame, SizeHint};
use sluicegate_core::memory::LeaseGuard;

use crate::key::Key;

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
    pub(super) fn leased(inner: B, guard: LeaseGuard<'static, Key>) -> Self {
        Self {
            inner,
            guard: Some(guard),
        }
    }

    /// A body holding no lease (answers made here or by the overload strategy).
    pub(super) fn unleased(inner: B) -> Self {
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
