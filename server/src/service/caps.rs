//! The bounds on what the store holds.

use sluicegate_policy::Policy;

use super::error::{Result, ServiceError};
use crate::config::Config;
use crate::store::Snapshot;

/// Refuses `policy` as `name` if it would be one more than `config` allows, as of
/// `snapshot`: the most policies in all and per app (`--max-policies`,
/// `--max-policies-per-app`), so that one owner cannot slow the store for everyone (a
/// few concurrent writes may pass a cap by as many: it bounds size, it is not a quota).
pub(super) fn check(
    config: &Config,
    snapshot: &Snapshot,
    name: &str,
    policy: &Policy,
) -> Result<()> {
    let current = snapshot.policies.get(name);
    if current.is_none() && snapshot.policies.len() >= config.max_policies {
        return Err(ServiceError::Conflict(format!(
            "the store holds {} policies, the most allowed (--max-policies)",
            config.max_policies
        )));
    }
    let added = policy
        .apps
        .iter()
        .filter(|app| current.is_none_or(|c| !c.policy.apps.contains(app)));
    for app in added {
        let listed = snapshot
            .policies
            .values()
            .filter(|s| s.policy.apps.contains(app))
            .count();
        if listed >= config.max_policies_per_app {
            return Err(ServiceError::Conflict(format!(
                "app {app:?} has {listed} policies, the most allowed (--max-policies-per-app)"
            )));
        }
    }
    Ok(())
}
