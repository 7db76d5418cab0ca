//! Decisions and leases for an app: the one path both front ends decide through.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Instant;

use opentelemetry::KeyValue;
use sluicegate_core::host::Outcome;
use sluicegate_core::rwlock::RwState;
use sluicegate_core::{Decision, Ticks};
use sluicegate_policy::cel::Bindings;
use sluicegate_policy::text::human;

use crate::limiters::{DecideError, LeaseAnswer, LeaseOp, Limiters, PolicyLimiter, MAX_KEY};
use crate::store::{Snapshot, Stored, User};
use crate::telemetry;
use crate::time::now_s;

use super::auth::App;
use super::error::{Result, ServiceError};
use super::state::{Served, Service};

/// How a trace names an outcome.
fn outcome_name(outcome: &Outcome<()>) -> &'static str {
    match outcome {
        Outcome::Decided(d) if d.allowed => "allowed",
        Outcome::Decided(_) => "denied",
        Outcome::Local(d, ()) if d.allowed => "allowed locally",
        Outcome::Local(..) => "denied locally",
        Outcome::Open(()) => "open",
        Outcome::Closed(()) => "closed",
    }
}

/// The most decisions in one call (a batch, or an Envoy request's descriptors).
pub(crate) const MAX_BATCH: usize = 1000;

/// A decision as answered: the limit's own, made as if enforcing, and whether it was
/// made in shadow mode (the policy's `shadow` or `--shadow`), where the request is
/// admitted whatever the limit says.
#[derive(Debug, Clone)]
pub(crate) struct Decided {
    /// What the limit decided (its state moved exactly as when enforcing), or, its
    /// store unreachable, what the fail policy answered (open or closed: no figures).
    pub(crate) outcome: Outcome<()>,
    /// Made in shadow mode.
    pub(crate) shadow: bool,
}

impl Decided {
    /// Whether the request is admitted: always, in shadow mode.
    pub(crate) fn admitted(&self) -> bool {
        self.outcome.allowed() || self.shadow
    }

    /// The decision with its figures, unless the fail policy answered without any.
    pub(crate) fn decision(&self) -> Option<&Decision> {
        self.outcome.decision()
    }
}

/// A decision asked for: `cost` units of `key` under `policy`.
#[derive(Clone, Copy)]
pub(crate) struct Ask<'a, 'd> {
    pub(crate) policy: &'a str,
    pub(crate) key: &'a str,
    pub(crate) cost: u64,
    /// The request's descriptors as a policy's `when` and `key` read them: called only
    /// for a policy that has either.
    pub(crate) descriptors: &'a (dyn Fn() -> Bindings<'d> + Sync),
}

/// A lease asked for: `owner`'s lease on `key` under `policy`, for `ttl` ticks (none:
/// the policy's own).
#[derive(Debug)]
pub(crate) struct LeaseAsk<'a> {
    pub(crate) policy: &'a str,
    pub(crate) key: &'a str,
    pub(crate) owner: &'a str,
    pub(crate) ttl: Option<Ticks>,
}

/// The policy `name` if `app` may use it: a policy that does not exist and one that
/// does not list the app answer alike.
pub(crate) fn policy_for<'a>(snapshot: &'a Snapshot, app: &App, name: &str) -> Result<&'a Stored> {
    snapshot
        .policies
        .get(name)
        .filter(|s| s.policy.admits_app(app.name()))
        .ok_or_else(|| ServiceError::forbidden(format!("no such policy for this app: {name:?}")))
}

pub(super) fn check_key(key: &str) -> Result<()> {
    if key.is_empty() || key.len() > MAX_KEY {
        return Err(ServiceError::invalid(
            format!("a key is 1 to {MAX_KEY} bytes"),
            Some("key"),
        ));
    }
    Ok(())
}

/// The key `ask` counts on under `entry`'s `when` and `key`: `None` where they leave
/// the request out.
fn selected<'a>(entry: &PolicyLimiter, ask: &Ask<'a, '_>) -> Result<Option<Cow<'a, str>>> {
    let Some(selector) = entry.selector() else {
        return Ok(Some(Cow::Borrowed(ask.key)));
    };
    let failed = |why: String| ServiceError::Expression(format!("policy {:?}: {why}", ask.policy));
    let key = selector
        .select(ask.policy, ask.key, &mut (ask.descriptors)())
        .map_err(|e| failed(e.0))?;
    match key {
        Some(key) if key.is_empty() || key.len() > MAX_KEY => Err(failed(format!(
            "the value of `key` is 1 to {MAX_KEY} bytes, got {}",
            key.len()
        ))),
        key => Ok(key),
    }
}

/// The limiter of `stored`, built when the snapshot was.
pub(super) fn entry<'a>(limiters: &'a Limiters, stored: &Stored) -> Result<&'a Arc<PolicyLimiter>> {
    limiters
        .get(&stored.name)
        .ok_or(ServiceError::Unavailable("the policy has no limiter"))
}

impl Service {
    /// Decides `ask` for `app` with the policies `served` (a batch reads them once),
    /// counting it in the metrics. Returns the policy's limiter too: its headers describe
    /// the decision. No decision where the policy's `when` or `key` leaves the request
    /// out.
    pub(crate) async fn decide(
        &self,
        served: &Served,
        app: &App,
        ask: Ask<'_, '_>,
    ) -> Result<(Arc<PolicyLimiter>, Option<Decided>)> {
        let Ask {
            policy, key, cost, ..
        } = ask;
        let stored = policy_for(&served.snapshot, app, policy)?;
        let entry = entry(&served.limiters, stored)?;
        check_key(key)?;
        let Some(key) = selected(entry, &ask)? else {
            return Ok((Arc::clone(entry), None));
        };
        let decided = self
            .decide_on(entry, &key, cost, stored.policy.shadow)
            .await?;
        Ok((Arc::clone(entry), Some(decided)))
    }

    /// Decides `cost` units of `key` on `entry`, a policy's limiter (in shadow mode if
    /// `shadow` or `--shadow`), counting it in the metrics: the step shared by
    /// sluicegate's policies and the rules of Envoy's YAML.
    pub(crate) async fn decide_on(
        &self,
        entry: &PolicyLimiter,
        key: &str,
        cost: u64,
        shadow: bool,
    ) -> Result<Decided> {
        check_key(key)?;
        let start = Instant::now();
        let decided = entry.decide(key, cost);
        let outcome = telemetry::child("decide", decided, |result| {
            let mut attributes = vec![
                KeyValue::new("sluicegate.policy", entry.name().to_owned()),
                KeyValue::new("sluicegate.backend", self.backend.name()),
            ];
            attributes.push(match result {
                Ok(outcome) => KeyValue::new("sluicegate.outcome", outcome_name(outcome)),
                Err(e) => KeyValue::new("error.type", telemetry::clipped(&e.to_string())),
            });
            attributes
        })
        .await?;
        let decided = Decided {
            outcome,
            shadow: self.config.shadow || shadow,
        };
        self.metrics.decision(
            entry.counters(),
            key,
            &decided.outcome,
            decided.shadow,
            u64::try_from(now_s()).unwrap_or(0),
            start.elapsed(),
        );
        Ok(decided)
    }

    /// Acquires, releases or renews a lease for `app`.
    pub(crate) async fn lease(
        &self,
        served: &Served,
        app: &App,
        op: LeaseOp,
        ask: &LeaseAsk<'_>,
    ) -> Result<LeaseAnswer> {
        let stored = policy_for(&served.snapshot, app, ask.policy)?;
        check_key(ask.key)?;
        let entry = entry(&served.limiters, stored)?;
        let Some(ttl) = ask.ttl.or(entry.lease_ttl()) else {
            return Err(DecideError::Rate(stored.name.clone()).into());
        };
        // One app holding keys of a shared table for months would refuse everyone's
        // new keys, or a dead waiter's place a fair queue: a lease or a place lasts at
        // most the policy's `max_lease`.
        let max = stored.policy.max_lease();
        let too_long = |field: &str| {
            ServiceError::invalid(
                format!(
                    "{field} is at most the policy's max_lease, {} ({max} µs)",
                    human(max)
                ),
                Some(field),
            )
        };
        if matches!(op, LeaseOp::Acquire { .. } | LeaseOp::Renew) && ttl > max {
            return Err(too_long("ttl_us"));
        }
        if matches!(op, LeaseOp::Acquire { wait: Some(wait), .. } if wait > max) {
            return Err(too_long("wait_us"));
        }
        Ok(entry.lease(op, ask.key, ask.owner, ttl).await?)
    }

    /// `key`'s holders and queue under the concurrency policy `name`, for a user who
    /// may read the policy, with the time its table reads now.
    pub(crate) async fn lease_state(
        &self,
        served: &Served,
        user: &User,
        name: &str,
        key: &str,
    ) -> Result<(Option<RwState>, Ticks)> {
        let stored = self.policy(user, name)?;
        check_key(key)?;
        let entry = entry(&served.limiters, &stored)?;
        Ok(entry.lease_state(key).await?)
    }
}
