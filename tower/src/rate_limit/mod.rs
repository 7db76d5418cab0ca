//! The rate limit: a [`RateLimitLayer`] builds [`RateLimit`] services deciding each
//! request with a shared [`Backend`](crate::Backend), answered through a
//! [`ResponseFuture`].

mod config;
mod future;
mod layer;
mod service;

pub use config::OnBadKey;
pub use future::ResponseFuture;
pub use layer::RateLimitLayer;
pub use service::RateLimit;
