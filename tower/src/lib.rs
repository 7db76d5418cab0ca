#![doc = include_str!("../README.md")]
#![deny(missing_docs)]
#![warn(unreachable_pub)]
// docs.rs marks what each feature adds.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod body;
mod concurrency;
mod error;
mod headers;
mod key;
mod limiter;
mod rate_limit;
#[cfg(feature = "remote")]
mod remote;
mod report;
mod response;
mod strategy;

pub use body::UntilDone;
pub use concurrency::{ConcurrencyLimit, ConcurrencyLimitLayer, LeaseBody};
pub use error::Error;
pub use headers::{RateLimitPolicy, MAX_NAME, RATELIMIT, RATELIMIT_POLICY};
pub use key::{Cidr, Key, KeyError, KeyExtractor, KeyFn};
#[cfg(feature = "redis")]
pub use limiter::RedisBackend;
pub use limiter::{Backend, BoxFuture, InProcess, NoWait, Pending, Quota, Settled, Verdict};
pub use rate_limit::{OnBadKey, RateLimit, RateLimitLayer, ResponseFuture};
#[cfg(feature = "remote")]
pub use remote::{Remote, RemoteFail};
pub use report::{ReportBody, Reportable, ReportedCost, Reporting};
pub use strategy::{Degrade, Overload, Reject, Wait};
