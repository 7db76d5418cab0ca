//! Names of policies, apps and users.

use super::error::{Result, ServiceError};

/// The longest name of a policy, app or user (the `RateLimit-Policy` header's limit).
pub(crate) const MAX_NAME: usize = sluicegate_tower::MAX_NAME;

/// 1 to [`MAX_NAME`] letters, digits, `-`, `_`, `.` (so names go into headers, metric
/// labels and URLs unchanged); `field` names the argument in the error.
pub(crate) fn check_name(name: &str, field: &str) -> Result<()> {
    let valid = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    if name.is_empty() || name.len() > MAX_NAME || !name.chars().all(valid) {
        return Err(ServiceError::invalid(
            format!("a {field} is 1 to {MAX_NAME} letters, digits, '-', '_' or '.'"),
            Some(field),
        ));
    }
    Ok(())
}
