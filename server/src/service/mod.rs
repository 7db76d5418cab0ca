//! The decision service: the state every request shares and its reload, who is calling
//! ([`auth`]), decisions and leases, and the management of policies, apps and users,
//! with its own errors ([`ServiceError`]). It knows nothing of HTTP or gRPC: both front
//! ends call it as siblings, as Envoy's rate limit service and HTTP do over one limiter
//! in Kuadrant's limitador, and each maps its errors itself.

mod accounts;
pub(crate) mod auth;
mod caps;
mod decide;
// The YAML's rules are answered by the gRPC front end alone.
#[cfg_attr(not(feature = "grpc"), allow(dead_code))]
mod domains;
mod error;
mod names;
mod policies;
mod ready;
mod report;
mod state;

pub(crate) use accounts::Holder;
#[cfg(feature = "grpc")]
pub(crate) use decide::policy_for;
pub(crate) use decide::{Ask, Decided, LeaseAsk, MAX_BATCH};
#[cfg(feature = "grpc")]
pub(crate) use domains::Rules;
pub(crate) use error::ServiceError;
pub(crate) use names::check_name;
pub(crate) use policies::validate;
pub(crate) use report::Estimate;
pub(crate) use state::{Loaded, Served, Service};
