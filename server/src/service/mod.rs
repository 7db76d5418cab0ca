//! The decision service: the state every request shares and its reload, who is calling
//! ([`auth`]), decisions and leases, and the management of policies, apps and users,
//! with its own errors ([`ServiceError`]). It knows nothing of HTTP or gRPC: both front
//! ends call it as siblings, as Envoy's rate limit service and HTTP do over one limiter
//! in Kuadrant's limitador, and each maps its errors itself.

mod accounts;
pub(crate) mod auth;
mod decide;
mod error;
mod names;
mod policies;
mod report;
mod state;

pub(crate) use accounts::Holder;
pub(crate) use decide::{Decided, LeaseRequest, MAX_BATCH};
pub(crate) use error::ServiceError;
pub(crate) use names::check_name;
pub(crate) use policies::{validate, Caps};
pub(crate) use report::Estimate;
pub(crate) use state::Service;
