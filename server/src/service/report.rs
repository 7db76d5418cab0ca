//! Costs known only after the work: a report charges (or refunds) a key, and a decision
//! may admit on an estimate that a later report with the same id settles. Each id
//! counts once, also across servers on one store (see `docs/design/reported-costs.md`).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use sluicegate_core::{Decision, Reported};

use crate::limiters::PolicyLimiter;
use crate::store::{Claim, Remembered, ReportId, Stored};
use crate::time::now_s;

use super::auth::App;
use super::decide::{check_key, entry, policy_for, Decided};
use super::error::{Result, ServiceError};
use super::state::{Served, Service};

/// How long an id is remembered, in seconds: a retry within it is counted once, and a
/// decision's estimate is settled by a report within it.
pub(crate) const REPORT_RETENTION_S: i64 = 24 * 3600;

/// Old ids are pruned at most this often, in seconds, by each server.
const PRUNE_EVERY_S: i64 = 60;

/// The longest id, in bytes.
const MAX_ID: usize = 256;

/// What a report did.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReportAnswer {
    /// Units recorded; for a retry, the first report's (`None` while it is applied).
    pub(crate) recorded: Option<u64>,
    /// Units beyond the bound, not recorded.
    pub(crate) dropped: Option<u64>,
    /// What a request of cost zero gets after it.
    pub(crate) decision: Decision,
    /// A retry of a report already counted: it changed nothing.
    pub(crate) duplicate: bool,
}

/// A decision asked on an estimate: `estimate` units of `key` on `policy`, to be
/// settled by the report `id`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Estimate<'a> {
    pub(crate) policy: &'a str,
    pub(crate) key: &'a str,
    pub(crate) estimate: u64,
    pub(crate) id: &'a str,
}

fn check_id(id: &str) -> Result<()> {
    if id.is_empty() || id.len() > MAX_ID {
        return Err(ServiceError::invalid(
            format!("an id is 1 to {MAX_ID} bytes"),
            Some("id"),
        ));
    }
    Ok(())
}

/// A cost as a report's adjustment.
fn signed(cost: u64, field: &str) -> Result<i64> {
    i64::try_from(cost)
        .map_err(|_| ServiceError::invalid(format!("{field} is at most {}", i64::MAX), Some(field)))
}

impl Service {
    /// The policy `name` for `app`'s reports on `key`, and its limiter, if it takes
    /// them: checked before an id is claimed, so that a claimed report is always applied.
    pub(crate) fn reporting<'s>(
        served: &'s Served,
        app: &App,
        name: &str,
        key: &str,
    ) -> Result<(&'s Stored, Arc<PolicyLimiter>)> {
        let stored = policy_for(&served.snapshot, app, name)?;
        check_key(key)?;
        let entry = entry(&served.limiters, stored)?;
        entry.check_report()?;
        if entry.selector().is_some() {
            return Err(ServiceError::invalid(
                format!("policy {name:?} has a `when` or `key`, which read a request's descriptors: it takes no estimates nor reports"),
                Some("policy"),
            ));
        }
        Ok((stored, Arc::clone(entry)))
    }

    /// Applies `adjustment` to `key` on `entry`, counting it: with no id,
    /// each call counts (Envoy's second call after the response, as limitador's
    /// `report`).
    pub(crate) async fn apply(
        &self,
        entry: &PolicyLimiter,
        key: &str,
        adjustment: i64,
    ) -> Result<Reported> {
        let reported = entry.report(key, adjustment).await?;
        self.metrics
            .report(entry.counters(), adjustment, reported.recorded);
        Ok(reported)
    }

    /// Where the report `id` of `app` on `key` under `name` is kept, and now.
    async fn kept_at<'a>(
        &self,
        app: &'a App,
        id: &'a str,
        name: &'a str,
        key: &'a str,
    ) -> Result<(ReportId<'a>, i64)> {
        check_id(id)?;
        let now = now_s();
        let at = ReportId {
            app: app.name(),
            id,
            policy: name,
            key,
        };
        Ok((at, now))
    }

    /// Reports that `key`'s work under `policy` cost `cost` units, once per `id`: less
    /// the estimate a decision with this id admitted (a refund if the cost is lower).
    pub(crate) async fn report(
        self: &Arc<Self>,
        served: &Served,
        app: &App,
        policy: &str,
        key: &str,
        cost: u64,
        id: &str,
    ) -> Result<ReportAnswer> {
        let (stored, limiter) = Self::reporting(served, app, policy, key)?;
        let (at, now) = self.kept_at(app, id, &stored.name, key).await?;
        let cost = signed(cost, "cost")?;
        // Claimed, charged and settled on a task of its own: a client gone half-way
        // cannot leave the id claimed and uncharged.
        let service = Arc::clone(self);
        let owned = [at.app, at.id, at.policy, at.key].map(str::to_owned);
        let settling = tokio::spawn(async move {
            let [app, id, policy, key] = &owned;
            let at = ReportId {
                app,
                id,
                policy,
                key,
            };
            service.claim_and_charge(at, &limiter, cost, now).await
        });
        settling
            .await
            .map_err(|_| ServiceError::Internal("a report's task stopped"))?
    }

    /// Claims the report `at` of `cost` units and charges it on `limiter` (once per id):
    /// a charge that fails gives the claim back, so the retry charges it.
    async fn claim_and_charge(
        &self,
        at: ReportId<'_>,
        limiter: &PolicyLimiter,
        cost: i64,
        now: i64,
    ) -> Result<ReportAnswer> {
        let ReportId { id, key, .. } = at;
        match self
            .store
            .claim_report(at, cost.unsigned_abs(), now, self.config.max_report_ids)
            .await?
        {
            Claim::Full => Err(self.full(at.app)),
            Claim::Elsewhere => Err(ServiceError::Conflict(format!(
                "id {id:?} was used for another policy or key"
            ))),
            Claim::OtherCost(stored) => Err(ServiceError::Conflict(format!(
                "id {id:?} was reported with a cost of {stored}, not {cost}: an id names one report"
            ))),
            Claim::Seen { recorded, dropped } => Ok(ReportAnswer {
                recorded,
                dropped,
                decision: limiter.report(key, 0).await?.decision,
                duplicate: true,
            }),
            Claim::Won { estimate } => {
                let adjustment = cost.saturating_sub(signed(estimate, "estimate")?);
                let reported = match self.apply(limiter, key, adjustment).await {
                    Ok(reported) => reported,
                    Err(e) => {
                        if let Err(release) = self.store.release_report(at).await {
                            tracing::warn!(error = %release, "giving back a report's id");
                            self.metrics.store_error();
                        }
                        return Err(e);
                    }
                };
                self.store
                    .settle_report(at, reported.recorded, reported.dropped)
                    .await?;
                Ok(ReportAnswer {
                    recorded: Some(reported.recorded),
                    dropped: Some(reported.dropped),
                    decision: reported.decision,
                    duplicate: false,
                })
            }
        }
    }

    /// Decides `estimate` units of `key` on `policy` and remembers them under `id`, for
    /// the report that settles them. An id used before is refused (and what this
    /// decision took given back).
    pub(crate) async fn decide_estimate(
        &self,
        served: &Served,
        app: &App,
        asked: Estimate<'_>,
    ) -> Result<(Arc<PolicyLimiter>, Decided)> {
        let Estimate {
            policy,
            key,
            estimate,
            id,
        } = asked;
        let (stored, entry) = Self::reporting(served, app, policy, key)?;
        let name = &stored.name;
        let (at, now) = self.kept_at(app, id, name, key).await?;
        let taken = signed(estimate, "estimate")?;
        let decided = self
            .decide_on(&entry, key, estimate, stored.policy.shadow)
            .await?;
        // A denial took nothing: the report will charge its whole cost.
        let taken = if decided.outcome.allowed() { taken } else { 0 };
        let remembered = self
            .store
            .remember_estimate(at, taken.unsigned_abs(), now, self.config.max_report_ids)
            .await;
        let refusal = match remembered {
            Ok(Remembered::New) => return Ok((entry, decided)),
            Ok(Remembered::Used) => ServiceError::Conflict(format!(
                "id {id:?} was used before: an id names one decision and its report"
            )),
            Ok(Remembered::Full) => self.full(at.app),
            Err(e) => e.into(),
        };
        // No report will settle what this decision took: it is given back.
        entry.report(key, -taken).await?;
        Err(refusal)
    }

    /// The refusal of a new id to `app`, which holds as many as it may.
    fn full(&self, app: &str) -> ServiceError {
        ServiceError::Conflict(format!(
            "app {app:?} holds {} reports' ids, the most allowed (--max-report-ids); each is kept 24 hours",
            self.config.max_report_ids
        ))
    }

    /// Forgets the ids older than the retention, at most every [`PRUNE_EVERY_S`] (the
    /// store poller calls it, never a request); a failure is only logged.
    pub(crate) async fn prune_reports(&self, now: i64) {
        let last = self.reports_pruned.load(Ordering::Relaxed);
        if now - last < PRUNE_EVERY_S
            || self
                .reports_pruned
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        if let Err(e) = self.store.prune_reports(now - REPORT_RETENTION_S).await {
            tracing::warn!(error = %e, "pruning reports' ids");
            self.metrics.store_error();
        }
    }
}
