//! Why a lease was not granted or given back.

use crate::{Decision, Grant, LeaseError};

/// Why a lease was not granted.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AcquireError {
    /// Every lease is held (until the deadline, when waiting), or a keyed table is full
    /// of keys in use; `retry_after` is the time until the earliest one expires.
    #[error("every lease is held")]
    Busy(Decision),
    /// A parameter is out of range, or the owner's holds or the key's tokens ran out.
    #[error(transparent)]
    Lease(#[from] LeaseError),
}

/// What releasing or renewing a lease returns: the lease as it stands.
pub(super) type Released = Result<Grant, LeaseError>;
