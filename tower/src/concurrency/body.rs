//! The response body that holds its request's lease until it ends.

use sluicegate_core::memory::LeaseGuard;

use crate::body::UntilDone;
use crate::key::Key;

/// A response body holding its request's lease: the lease is released when the body
/// ends, fails, or is dropped unfinished (the client disconnected).
pub type LeaseBody<B> = UntilDone<B, LeaseGuard<'static, Key>>;
