//! The response body that holds something (a lease, a report owed) until the response is
//! done: what that thing does when dropped happens when the body ends, fails, or is
//! dropped unfinished (the client went away), once.

use std::pin::Pin;
use std::task::{Context, Poll};

use http_body::{Body, Frame, SizeHint};

pin_project_lite::pin_project! {
    /// The inner body, holding `H` until it ends, fails, or is dropped unfinished. See
    /// [`LeaseBody`](crate::LeaseBody) and [`ReportBody`](crate::ReportBody).
    pub struct UntilDone<B, H> {
        #[pin]
        inner: B,
        held: Option<H>,
    }
}

impl<B, H> std::fmt::Debug for UntilDone<B, H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UntilDone")
            .field("holding", &self.held.is_some())
            .finish_non_exhaustive()
    }
}

impl<B, H> UntilDone<B, H> {
    /// `inner`, holding `held` if any.
    pub(crate) fn new(inner: B, held: Option<H>) -> Self {
        Self { inner, held }
    }

    /// `inner`, holding nothing (answers made here, denials).
    pub(crate) fn bare(inner: B) -> Self {
        Self::new(inner, None)
    }
}

impl<B: Body, H> Body for UntilDone<B, H> {
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
            this.held.take();
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
