//! The service's answers as the protocol's types: errors as gRPC codes, times as
//! durations, periods as Envoy's units.

use sha2::{Digest, Sha256};
use sluicegate_core::Ticks;
use sluicegate_policy::envoy::Unit;
use tonic::Status;

use super::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use crate::limiters::MAX_KEY;
use crate::service::ServiceError;

/// A descriptor's key as decided: itself, or beyond the longest key kept, `#sha256:` and
/// its digest, so that a long header value is counted, never an error for the whole
/// call. No descriptor's own key takes that form: each holds an unescaped `=`.
pub(super) fn bounded(key: String) -> String {
    if key.len() <= MAX_KEY {
        return key;
    }
    let digest = Sha256::digest(key.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("#sha256:{hex}")
}

/// The status of a descriptor that could not be decided (its error is the call's only
/// when no sibling is over).
pub(super) fn undecided() -> DescriptorStatus {
    DescriptorStatus {
        code: Code::Unknown as i32,
        ..DescriptorStatus::default()
    }
}

/// A service error as the gRPC code that means the same.
pub(super) fn status(e: ServiceError) -> Status {
    let message = e.to_string();
    match e {
        ServiceError::Unauthorized(_) => Status::unauthenticated(message),
        ServiceError::Forbidden(_) => Status::permission_denied(message),
        ServiceError::NotFound(_) => Status::not_found(message),
        ServiceError::Invalid { .. } => Status::invalid_argument(message),
        ServiceError::Unavailable(_) | ServiceError::Expression(_) => Status::unavailable(message),
        ServiceError::Conflict(_)
        | ServiceError::Stale(_)
        | ServiceError::Gone
        | ServiceError::VersionRequired => Status::failed_precondition(message),
        ServiceError::Internal(_) => Status::internal(message),
    }
}

/// `micros` as the protocol's duration.
pub(super) fn duration(micros: Ticks) -> prost_types::Duration {
    prost_types::Duration {
        seconds: i64::try_from(micros / 1_000_000).unwrap_or(i64::MAX),
        // Below 10^9: the remainder of a division by 10^6, times 1000.
        nanos: i32::try_from(micros % 1_000_000 * 1000).unwrap_or(0),
    }
}

/// Envoy's unit number for a period of exactly one second, minute, hour or day (0,
/// unknown, for any other).
pub(super) fn unit_of(period: Ticks) -> i32 {
    [Unit::Second, Unit::Minute, Unit::Hour, Unit::Day]
        .into_iter()
        .find(|unit| unit.seconds() * 1_000_000 == period)
        .map_or(0, |unit| unit as i32)
}

/// `n` as the protocol's 32 bits, the largest where it does not fit.
pub(super) fn saturate(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}
