//! The HTTP API (see `API.md`): one file of handlers per resource, the caller checked by
//! an extractor ([`auth`]), every error answered in one shape ([`error`]). The handlers
//! read requests and write answers; what they do is the decision service's.

mod accounts;
mod assets;
mod audit;
mod auth;
mod body;
mod decide;
mod error;
mod limitador;
mod metrics;
mod page;
mod policies;
mod report;
pub(crate) mod router;

pub(crate) use metrics::PROBES;
