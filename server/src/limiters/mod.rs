//! The limiters: one per policy, built by the server's [`Backend`] (in this process or
//! in Redis), rebuilt only when a policy's parameters change, so editing its apps or
//! description keeps its counts; a change of parameters is [`Carried`].

mod backend;
mod carried;
pub(crate) mod coalesce;
mod memory;
mod redis;

use std::collections::HashMap;
use std::mem::discriminant;
use std::sync::Arc;
use std::time::Duration;

use sluicegate_core::rwlock::{RwLease, RwState};
use sluicegate_core::{LeaseRequest, Outcome, ReportRequest, Reported, Request, Ticks};
use sluicegate_policy::{Built, Policy, Selector, Style};

pub(crate) use backend::{Backend, DecideError, LeaseAnswer, LeaseOp, Unsupported};
use backend::{LeaseTable, RateLimit};
use carried::Carried;
pub(crate) use memory::{InProcess, Keys};
pub(crate) use redis::InRedis;

use crate::metrics::{Counters, Metrics, Table};

/// The longest key, in bytes.
pub(crate) const MAX_KEY: usize = 1024;

/// One policy's limiter (or lease tables) and the headers it stamps.
#[derive(Debug)]
pub(crate) struct PolicyLimiter {
    /// The policy's name (an Envoy rule's, as the metrics name it), for errors and traces.
    name: String,
    /// What the policy builds: its limiter is rebuilt only when this or `on_full`
    /// changes.
    pub(crate) built: Built,
    /// The policy's `when` and `key`, if it has either.
    selector: Option<Selector>,
    on_full: sluicegate_core::memory::OnFull,
    /// `RateLimit-Policy` for this policy.
    pub(crate) header: Option<sluicegate_tower::RateLimitPolicy>,
    limits: Limits,
    /// The policy's counters in the metrics (kept when the limiter is rebuilt).
    counters: Arc<Counters>,
}

/// A rate policy's limiter, or a concurrency policy's lease tables.
#[derive(Debug, Clone)]
enum Limits {
    Rate {
        /// What the backend built: the next change's old limiter.
        own: Arc<dyn RateLimit>,
        /// What decides: `own`, or `own` carrying the limiter before a change.
        deciding: Arc<dyn RateLimit>,
    },
    Leases(Arc<dyn LeaseTable>),
}

/// Why a policy has no limiter.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum BuildError {
    /// The policy is invalid.
    #[error(transparent)]
    Policy(#[from] sluicegate_policy::Problem),
    /// The backend cannot decide it.
    #[error(transparent)]
    Unsupported(#[from] Unsupported),
}

impl PolicyLimiter {
    /// The limiter for the policy `name` on `backend`, or `previous` if its parameters
    /// are the same; its decisions count into `metrics`.
    pub(crate) fn build(
        name: &str,
        policy: &Policy,
        backend: &dyn Backend,
        previous: Option<&Arc<Self>>,
        metrics: &Metrics,
    ) -> Result<Arc<Self>, BuildError> {
        let (built, selector) = policy.build_selected(Style::File)?;
        let on_full = policy.on_full.unwrap_or_default();
        if let Some(previous) = previous.filter(|p| p.built == built && p.on_full == on_full) {
            if previous.selector == selector {
                return Ok(Arc::clone(previous));
            }
            // Another `when` or `key` on the same limiter: its counts are kept.
            return Ok(Arc::new(Self {
                selector,
                name: previous.name.clone(),
                built,
                on_full,
                header: previous.header.clone(),
                limits: previous.limits.clone(),
                counters: Arc::clone(&previous.counters),
            }));
        }
        let header = sluicegate_tower::RateLimitPolicy::new(
            name,
            policy.limit(),
            Duration::from_micros(policy.period()),
        )
        .ok();
        let limits = match &built {
            Built::Leases { model, fair, .. } => {
                let lock = RwLease::counted(*model);
                let lock = if *fair { lock.fair() } else { lock };
                Limits::Leases(backend.leases(name, policy, lock))
            }
            Built::Rule(rule) => {
                let own = backend.rate(name, policy, rule)?;
                // The same algorithm: each key's use is carried out of the old limiter.
                let deciding = match previous.map(|p| (&p.limits, &p.built)) {
                    Some((Limits::Rate { own: old, .. }, Built::Rule(old_rule)))
                        if discriminant(old_rule) == discriminant(rule) =>
                    {
                        Arc::new(Carried::new(Arc::clone(&own), Arc::clone(old)))
                    }
                    _ => Arc::clone(&own),
                };
                Limits::Rate { own, deciding }
            }
            _ => {
                return Err(BuildError::Unsupported(Unsupported {
                    field: None,
                    why: format!("policy {name:?}: this server cannot run it"),
                }))
            }
        };
        Ok(Arc::new(Self {
            name: name.to_owned(),
            built,
            selector,
            on_full,
            header,
            limits,
            counters: metrics.counters(name),
        }))
    }

    /// The policy's name (an Envoy rule's, as the metrics name it).
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// The policy's `when` and `key`, if it has either.
    pub(crate) fn selector(&self) -> Option<&Selector> {
        self.selector.as_ref()
    }

    /// The policy's counters in the metrics.
    pub(crate) fn counters(&self) -> &Counters {
        &self.counters
    }

    /// The fill of the policy's key table in this process (its limiter, its lease table
    /// or its `--fail local` fallback), if it has one.
    pub(crate) fn table(&self) -> Option<Table> {
        match &self.limits {
            Limits::Rate { own, .. } => own.table(),
            Limits::Leases(leases) => leases.table(),
        }
    }

    /// The rate limiter deciding, or why the policy has none.
    fn rate(&self) -> Result<&dyn RateLimit, DecideError> {
        match &self.limits {
            Limits::Rate { deciding, .. } => Ok(&**deciding),
            Limits::Leases(_) => Err(DecideError::Leases(self.name.clone())),
        }
    }

    /// Decides `cost` units for `key`, or says what the fail policy answered.
    pub(crate) async fn decide(&self, key: &str, cost: u64) -> Result<Outcome<()>, DecideError> {
        self.rate()?.check(Request::new(key).cost(cost)).await
    }

    /// Whether this policy takes reports: checked before a report's id is claimed, so
    /// that a claimed report is always applied.
    pub(crate) fn check_report(&self) -> Result<(), DecideError> {
        if self.rate()?.algorithm().can_report() {
            Ok(())
        } else {
            Err(DecideError::NoReports(self.name.clone()))
        }
    }

    /// Reports `adjustment` units for `key` (negative: a refund), after the work.
    pub(crate) async fn report(&self, key: &str, adjustment: i64) -> Result<Reported, DecideError> {
        self.check_report()?;
        let request = ReportRequest::new(key).adjust(adjustment);
        self.rate()?.report(request).await
    }

    /// The policy's lease ttl (its `lease`), for calls that give none.
    pub(crate) fn lease_ttl(&self) -> Option<Ticks> {
        match self.built {
            Built::Leases { ttl, .. } => Some(ttl),
            _ => None,
        }
    }

    /// Acquires, releases or renews `owner`'s lease on `key` (for `ttl` ticks), or
    /// withdraws its place.
    pub(crate) async fn lease(
        &self,
        op: LeaseOp,
        key: &str,
        owner: &str,
        ttl: Ticks,
    ) -> Result<LeaseAnswer, DecideError> {
        let Limits::Leases(leases) = &self.limits else {
            return Err(DecideError::Rate(self.name.clone()));
        };
        sluicegate_core::Concurrency::check(owner.as_bytes(), ttl)?;
        let request = LeaseRequest::new(key).owner(owner).ttl(ttl);
        leases.lease(op, request).await
    }

    /// `key`'s holders and queue (`None` when nobody holds or waits), and the time its
    /// table reads now.
    pub(crate) async fn lease_state(
        &self,
        key: &str,
    ) -> Result<(Option<RwState>, Ticks), DecideError> {
        let Limits::Leases(leases) = &self.limits else {
            return Err(DecideError::Rate(self.name.clone()));
        };
        leases.state(key.as_bytes()).await
    }
}

/// Whether `policy` can run on `backend`. The error names the field at fault when
/// there is one.
pub(crate) fn check_backend(policy: &Policy, backend: &dyn Backend) -> Result<(), Unsupported> {
    match policy.build(Style::File) {
        Ok(Built::Rule(rule)) => backend.supports(&rule),
        _ => Ok(()),
    }
}

/// The limiters of every policy, by name.
pub(crate) type Limiters = HashMap<String, Arc<PolicyLimiter>>;
