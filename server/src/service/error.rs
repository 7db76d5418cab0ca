//! What the decision service refuses or fails at, in its own terms: each front end (HTTP,
//! gRPC) maps these to its statuses in one place.

use std::borrow::Cow;

use crate::limiters::DecideError;
use crate::store::{StoreError, Stored, WriteError};

/// A refusal or failure of the decision service.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ServiceError {
    /// No token, one nobody holds, or several: what is wrong.
    #[error("{0}")]
    Unauthorized(&'static str),
    /// The caller may not do this.
    #[error("{0}")]
    Forbidden(Cow<'static, str>),
    /// No such thing (or one the caller may not see).
    #[error("no such {0}")]
    NotFound(&'static str),
    /// An argument is out of range; `field` names it when one is to blame.
    #[error("{message}")]
    Invalid {
        /// What is wrong.
        message: String,
        /// The request's field at fault.
        field: Option<String>,
    },
    /// The change clashes with what exists (a name taken, the last admin).
    #[error("{0}")]
    Conflict(String),
    /// A policy change named a version that is no longer current.
    #[error("the policy changed: it is at version {}", .0.version)]
    Stale(Box<Stored>),
    /// A policy change named a version of a policy that no longer exists.
    #[error("the policy no longer exists; create it without If-Match")]
    Gone,
    /// A policy change named no version to change.
    #[error("changing a policy needs the version it changes")]
    VersionRequired,
    /// The store or the decision backend cannot answer now.
    #[error("{0}")]
    Unavailable(&'static str),
    /// A policy's `when` or `key` failed on the request (limitador's `UNAVAILABLE`).
    #[error("{0}")]
    Expression(String),
    /// Something that cannot happen did.
    #[error("{0}")]
    Internal(&'static str),
}

impl ServiceError {
    pub(crate) fn forbidden(message: impl Into<Cow<'static, str>>) -> Self {
        Self::Forbidden(message.into())
    }

    pub(crate) fn invalid(message: impl Into<String>, field: Option<&str>) -> Self {
        Self::Invalid {
            message: message.into(),
            field: field.map(str::to_owned),
        }
    }
}

impl From<StoreError> for ServiceError {
    fn from(e: StoreError) -> Self {
        tracing::error!(error = %e, "store");
        Self::Unavailable("the store is unavailable")
    }
}

impl From<DecideError> for ServiceError {
    fn from(e: DecideError) -> Self {
        match e {
            DecideError::Leases(_) | DecideError::Rate(_) | DecideError::NoReports(_) => {
                Self::invalid(e.to_string(), Some("policy"))
            }
            DecideError::Lease(ref inner) => {
                let field = match inner {
                    sluicegate_core::LeaseError::Param(
                        sluicegate_core::ParamError::OutOfRange { name, .. },
                    ) if *name == "ttl" => "ttl_us",
                    _ => "owner",
                };
                Self::invalid(e.to_string(), Some(field))
            }
            DecideError::Lock(ref inner) => {
                let field = match inner {
                    sluicegate_core::rwlock::LockError::Param(
                        sluicegate_core::ParamError::OutOfRange { name, .. },
                    ) => match *name {
                        "ttl" => "ttl_us",
                        "wait" => "wait_us",
                        _ => "owner",
                    },
                    _ => "key",
                };
                Self::invalid(e.to_string(), Some(field))
            }
            DecideError::Unavailable(_) => {
                tracing::warn!(error = %e, "decision backend");
                Self::Unavailable("the decision backend is unavailable")
            }
            _ => {
                tracing::error!(error = %e, "decision backend");
                Self::Unavailable("the decision backend failed")
            }
        }
    }
}

/// The service's results.
pub(crate) type Result<T, E = ServiceError> = std::result::Result<T, E>;

impl From<WriteError<ServiceError>> for ServiceError {
    fn from(e: WriteError<ServiceError>) -> Self {
        match e {
            WriteError::Store(e) => e.into(),
            WriteError::Refused(e) => e,
        }
    }
}
