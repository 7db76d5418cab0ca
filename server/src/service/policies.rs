//! Policies as their readers and owners see them, and what reads follow from them (the
//! audit log, the decision counts).

use crate::limiters::check_backend;
use crate::store::{AuditEntry, Stored, User};
use crate::time::now_s;
use sluicegate_policy::{Policy, Style};

use super::auth::{can_read, can_write, check_app_role, role};
use super::error::{Result, ServiceError};
use super::names::check_name;
use super::state::Service;

/// Why a write was refused inside its transaction.
fn check_write(
    user: &User,
    current: Option<&Stored>,
    next: Option<&Policy>,
    expected: Option<i64>,
) -> Result<()> {
    let not_owner = || ServiceError::forbidden("you must own every app the policy lists");
    if next.is_some_and(|next| !can_write(user, next)) {
        return Err(not_owner());
    }
    match current {
        None if next.is_none() => Err(ServiceError::NotFound("policy")),
        // A version names a policy that was: recreating it would undo a delete.
        None if expected.is_some() => Err(ServiceError::Gone),
        None => Ok(()),
        Some(current) => {
            if !can_read(user, &current.policy) {
                // Exists where the caller may not look: a delete sees nothing; a write
                // cannot take the name.
                return Err(if next.is_none() {
                    ServiceError::NotFound("policy")
                } else {
                    not_owner()
                });
            }
            if !can_write(user, &current.policy) {
                return Err(not_owner());
            }
            match expected {
                None => Err(ServiceError::VersionRequired),
                Some(v) if v != current.version => {
                    Err(ServiceError::Stale(Box::new(current.clone())))
                }
                Some(_) => Ok(()),
            }
        }
    }
}

/// A policy's own checks: its apps' names, then its parameters.
pub(crate) fn validate(policy: &Policy) -> Result<()> {
    for app in &policy.apps {
        check_name(app, "apps")?;
    }
    policy
        .build(Style::File)
        .map_err(|problem| ServiceError::invalid(problem.message, problem.field.as_deref()))?;
    Ok(())
}

impl Service {
    /// The policies `user` may read; with `app`, those of that app (a role in it
    /// needed).
    pub(crate) fn policies(&self, user: &User, app: Option<&str>) -> Result<Vec<Stored>> {
        if let Some(app) = app {
            check_app_role(user, app)?;
        }
        Ok(self
            .snapshot()
            .policies
            .values()
            .filter(|s| match app {
                Some(app) => s.policy.apps.iter().any(|a| a == app),
                None => can_read(user, &s.policy),
            })
            .cloned()
            .collect())
    }

    /// Policy `name`, if `user` may read it (else it does not exist for them).
    pub(crate) fn policy(&self, user: &User, name: &str) -> Result<Stored> {
        self.snapshot()
            .policies
            .get(name)
            .filter(|s| can_read(user, &s.policy))
            .cloned()
            .ok_or(ServiceError::NotFound("policy"))
    }

    /// Creates or changes policy `name` (`expected`: the version it changes; none to
    /// create), checked against this server's backend.
    pub(crate) async fn put_policy(
        &self,
        user: &User,
        name: &str,
        policy: &Policy,
        expected: Option<i64>,
    ) -> Result<Stored> {
        check_name(name, "name")?;
        self.check_not_file(name)?;
        validate(policy)?;
        check_backend(policy, &*self.backend).map_err(|e| ServiceError::invalid(e.why, e.field))?;
        super::caps::check(&self.config, &self.snapshot(), name, policy)?;
        self.write(user, name, Some(policy), expected)
            .await?
            .ok_or(ServiceError::Internal("nothing written"))
    }

    /// Deletes policy `name` at version `expected`.
    pub(crate) async fn delete_policy(
        &self,
        user: &User,
        name: &str,
        expected: Option<i64>,
    ) -> Result<()> {
        self.check_not_file(name)?;
        self.write(user, name, None, expected).await.map(drop)
    }

    /// Refuses to change a policy read from a file (`--policies`): its file is where
    /// it changes, or the next read of the file would undo the change.
    fn check_not_file(&self, name: &str) -> Result<()> {
        match self
            .snapshot()
            .policies
            .get(name)
            .and_then(|s| s.file.clone())
        {
            Some(file) => Err(ServiceError::forbidden(format!(
                "policy {name:?} is read from the file {file}: change it there"
            ))),
            None => Ok(()),
        }
    }

    async fn write(
        &self,
        user: &User,
        name: &str,
        next: Option<&Policy>,
        expected: Option<i64>,
    ) -> Result<Option<Stored>> {
        let stored = self
            .store
            .write_policy(name, next, &user.name, now_s(), |current| {
                check_write(user, current, next, expected)
            })
            .await?;
        self.changed().await;
        Ok(stored)
    }

    /// The newest `limit` (1 to 1000) entries of the audit log `user` may see, older
    /// than entry `before` if given; with `app`, those of that app (a role in it needed).
    pub(crate) async fn audit(
        &self,
        user: &User,
        app: Option<&str>,
        limit: usize,
        before: Option<i64>,
    ) -> Result<Vec<AuditEntry>> {
        if let Some(app) = app {
            check_app_role(user, app)?;
        }
        let visible = |entry: &AuditEntry| match app {
            Some(app) => entry.apps.iter().any(|a| a == app),
            None => user.admin || entry.apps.iter().any(|app| role(user, app).is_some()),
        };
        Ok(self
            .store
            .audit(limit.clamp(1, 1000), before, visible)
            .await?)
    }

    /// The decision counts of the last ten minutes of each policy of `app`, by policy.
    pub(crate) fn stats(
        &self,
        user: &User,
        app: &str,
    ) -> Result<serde_json::Map<String, serde_json::Value>> {
        check_app_role(user, app)?;
        let now = u64::try_from(now_s()).unwrap_or(0);
        Ok(self
            .snapshot()
            .policies
            .values()
            .filter(|s| s.policy.apps.iter().any(|a| a == app))
            .map(|s| (s.name.clone(), self.metrics.series(&s.name, now)))
            .collect())
    }
}
