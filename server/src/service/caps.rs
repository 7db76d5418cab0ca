//! The bounds on what the store holds.

use sluicegate_policy::Policy;

use super::error::{Result, ServiceError};
use crate::store::Snapshot;

/// The most policies the store may hold, in all and per app (`--max-policies`,
/// `--max-policies-per-app`), so that one owner cannot slow the store for everyone.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Caps {
    /// In all.
    pub(crate) total: usize,
    /// Listing one app.
    pub(crate) per_app: usize,
    /// Reports' ids one app may hold at once (`--max-report-ids`).
    pub(crate) report_ids: usize,
}

impl Caps {
    /// Refuses `policy` as `name` if it would be one more than a cap allows, as of
    /// `snapshot` (a few concurrent writes may pass a cap by as many: it bounds size,
    /// it is not a quota).
    pub(super) fn check(self, snapshot: &Snapshot, name: &str, policy: &Policy) -> Result<()> {
        let current = snapshot.policies.get(name);
        if current.is_none() && snapshot.policies.len() >= self.total {
            return Err(ServiceError::Conflict(format!(
                "the store holds {} policies, the most allowed (--max-policies)",
                self.total
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
            if listed >= self.per_app {
                return Err(ServiceError::Conflict(format!(
                    "app {app:?} has {listed} policies, the most allowed (--max-policies-per-app)"
                )));
            }
        }
        Ok(())
    }
}
