//! The concurrency limit: at most N requests in flight, each holding a lease until its
//! response body ends.

mod body;
mod layer;
mod service;

pub use body::LeaseBody;
pub use layer::ConcurrencyLimitLayer;
pub use service::ConcurrencyLimit;
