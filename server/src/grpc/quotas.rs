//! The limits shared over Envoy's quota protocol: each limit's subscribers (a bucket of
//! a stream), their demand measured on this server's clock, and their shares, which
//! every report re-computes and any change pushes to the streams concerned at once.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use sluicegate_core::share::{Claim, Sharing};
use tokio::time::Instant;

use super::envoy::r#type::v3::rate_limit_strategy::{BlanketRule, Strategy};
use super::envoy::r#type::v3::{RateLimitStrategy, TokenBucket};
use super::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::{
    BucketAction as Action, QuotaAssignmentAction,
};
use super::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::BucketAction;
use super::envoy::service::rate_limit_quota::v3::BucketId;
use super::governs::Rate;
use super::mailbox::Mailbox;
use super::wire::saturate;
use crate::key_usage::escape;

/// Percent added to a subscriber's measured demand.
const HEADROOM_PERCENT: u64 = 20;
/// A share moves only when the new one differs by more than this percent.
const HYSTERESIS_PERCENT: u64 = 5;
/// The floor is this fraction of an equal split, so that floors idle among many
/// subscribers waste little of the limit.
const FLOOR_DIVISOR: u64 = 20;

/// A subscriber: a stream, and the proxy's number of one of its buckets.
type Subscriber = (u64, u64);

/// A subscriber's standing on one limit.
#[derive(Debug)]
struct Standing {
    bucket: Arc<BucketId>,
    mailbox: Arc<Mailbox>,
    /// Units per the limit's period it asked for lately (0 until measured).
    demand: u64,
    /// When its last report arrived; none before its first.
    reported: Option<Instant>,
    /// The share it was last sent.
    share: Option<u64>,
    /// The demand that share was computed from.
    shared_demand: u64,
}

/// One shared limit.
#[derive(Debug)]
struct Limit {
    /// The policy's name or the YAML rule's id.
    name: String,
    rate: Rate,
    subscribers: BTreeMap<Subscriber, Standing>,
}

/// One bucket's use in a report, governed by a shared limit.
#[derive(Debug)]
pub(super) struct Usage {
    pub(super) bucket: u64,
    pub(super) id: Arc<BucketId>,
    pub(super) limit: String,
    pub(super) name: String,
    pub(super) rate: Rate,
    /// Requests allowed plus denied since its last report.
    pub(super) requests: u64,
}

/// Every shared limit.
#[derive(Debug)]
pub(crate) struct Quotas {
    limits: Mutex<HashMap<String, Limit>>,
    /// How long an assignment lives: a few report intervals, whole seconds.
    ttl: Duration,
}

impl Quotas {
    /// Shares whose assignments live `ttl` (whole seconds, at least one).
    pub(crate) fn new(ttl: Duration) -> Self {
        Self {
            limits: Mutex::default(),
            ttl: Duration::from_secs(ttl.as_secs().max(1)),
        }
    }

    fn limits(&self) -> MutexGuard<'_, HashMap<String, Limit>> {
        self.limits.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How long an assignment lives.
    pub(super) fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Takes stream `stream`'s report of `usages` at `now`: each bucket's demand
    /// measured, the shares of its limit re-computed, changes pushed to every stream
    /// concerned, and each reported bucket's assignment re-sent to `mailbox`.
    pub(super) fn report(
        &self,
        stream: u64,
        mailbox: &Arc<Mailbox>,
        now: Instant,
        usages: Vec<Usage>,
    ) {
        let mut limits = self.limits();
        let mut touched = Vec::new();
        let mut reported = Vec::new();
        for usage in usages {
            let limit = limits.entry(usage.limit.clone()).or_insert_with(|| Limit {
                name: usage.name,
                rate: usage.rate,
                subscribers: BTreeMap::new(),
            });
            let rate_moved = limit.rate != usage.rate;
            limit.rate = usage.rate;
            let standing = limit
                .subscribers
                .entry((stream, usage.bucket))
                .or_insert_with(|| Standing {
                    bucket: Arc::clone(&usage.id),
                    mailbox: Arc::clone(mailbox),
                    demand: 0,
                    reported: None,
                    share: None,
                    shared_demand: 0,
                });
            standing.measure(now, usage.requests, limit.rate.period_s);
            // A steady report changes no share: the limit is re-shared only when one would.
            if rate_moved || standing.moved() {
                touched.push(usage.limit.clone());
            }
            reported.push((usage.limit, usage.bucket));
        }
        touched.sort_unstable();
        touched.dedup();
        for id in &touched {
            if let Some(limit) = limits.get_mut(id) {
                limit.reshare(self.ttl);
            }
        }
        // Re-sent unchanged, so that the proxy extends it before it expires.
        for (id, bucket) in reported {
            let standing = limits
                .get(&id)
                .and_then(|l| l.subscribers.get(&(stream, bucket)));
            if let (Some(limit), Some(standing)) = (limits.get(&id), standing) {
                let share = standing.share.unwrap_or(0);
                mailbox.post(
                    bucket,
                    assignment(&standing.bucket, &limit.rate, share, self.ttl),
                );
            }
        }
    }

    /// Stream `stream` no longer holds `buckets` (each with its limit): their shares
    /// go to the limits' other subscribers at once.
    pub(super) fn leave(&self, stream: u64, buckets: impl IntoIterator<Item = (String, u64)>) {
        let mut limits = self.limits();
        let mut touched = Vec::new();
        for (id, bucket) in buckets {
            let Some(limit) = limits.get_mut(&id) else {
                continue;
            };
            limit.subscribers.remove(&(stream, bucket));
            if limit.subscribers.is_empty() {
                limits.remove(&id);
            } else {
                touched.push(id);
            }
        }
        for id in touched {
            if let Some(limit) = limits.get_mut(&id) {
                limit.reshare(self.ttl);
            }
        }
    }

    /// Sends every subscriber its assignment once more with `ttl`, so that proxies
    /// fall back to their configured behaviour soon after this server stops.
    pub(super) fn expire_all(&self, ttl: Duration) {
        for limit in self.limits().values() {
            for (&(_, bucket), standing) in &limit.subscribers {
                let share = standing.share.unwrap_or(0);
                let action = assignment(&standing.bucket, &limit.rate, share, ttl);
                standing.mailbox.post(bucket, action);
            }
        }
    }
}

/// One policy's or rule's shares, all its keys together, for `/metrics`.
#[derive(Debug, Default)]
struct Figures {
    subscribers: usize,
    /// Units per second, in millionths.
    demand: u128,
    assigned: u128,
    limit: u128,
}

impl Quotas {
    /// The shares as Prometheus gauges by policy or rule (a bounded set of names, as
    /// the decisions' counters): subscribers, and demand, assigned and limit in units
    /// per second, all keys together.
    pub(super) fn render(&self) -> String {
        let mut by_name: BTreeMap<String, Figures> = BTreeMap::new();
        for limit in self.limits().values() {
            let figures = by_name.entry(limit.name.clone()).or_default();
            let per_second =
                |units: u64| u128::from(units) * 1_000_000 / u128::from(limit.rate.period_s.max(1));
            figures.subscribers += limit.subscribers.len();
            for standing in limit.subscribers.values() {
                figures.demand += per_second(standing.demand);
                figures.assigned += per_second(standing.share.unwrap_or(0));
            }
            figures.limit += per_second(limit.rate.units);
        }
        let gauges: [Gauge; 4] = [
            (
                "sluicegate_rlqs_subscribers",
                "Buckets of Envoy quota streams subscribed to a policy or rule.",
                |f| f.subscribers.to_string(),
            ),
            (
                "sluicegate_rlqs_demand_per_second",
                "Requests per second the subscribers asked for lately.",
                |f| micros(f.demand),
            ),
            (
                "sluicegate_rlqs_assigned_per_second",
                "Requests per second assigned to the subscribers.",
                |f| micros(f.assigned),
            ),
            (
                "sluicegate_rlqs_limit_per_second",
                "The limit shared, requests per second, all keys together.",
                |f| micros(f.limit),
            ),
        ];
        let mut out = String::new();
        for (metric, help, value) in gauges {
            let _ = writeln!(out, "# HELP {metric} {help}\n# TYPE {metric} gauge");
            for (name, figures) in &by_name {
                let _ = writeln!(
                    out,
                    "{metric}{{policy=\"{}\"}} {}",
                    escape(name),
                    value(figures)
                );
            }
        }
        out
    }
}

/// A gauge: its name, its help, and its value of one policy's figures.
type Gauge = (&'static str, &'static str, fn(&Figures) -> String);

/// Millionths as a decimal number.
fn micros(millionths: u128) -> String {
    format!("{}.{:06}", millionths / 1_000_000, millionths % 1_000_000)
}

impl Standing {
    /// Whether its share is due to be computed: none yet, or its demand moved past the
    /// hysteresis since, and by more than the unit a report's timing jitter rounds to.
    fn moved(&self) -> bool {
        let (was, now) = (u128::from(self.shared_demand), u128::from(self.demand));
        let by = was.abs_diff(now);
        self.share.is_none() || (by > 1 && by * 100 > was * u128::from(HYSTERESIS_PERCENT))
    }

    /// Takes `requests` reported at `now`: the demand in units per `period_s`,
    /// rising at once and falling by three quarters of the gap per report.
    fn measure(&mut self, now: Instant, requests: u64, period_s: u64) {
        let Some(since) = self.reported.replace(now) else {
            return;
        };
        let micros = now.duration_since(since).as_micros().max(1);
        let per_period =
            (u128::from(requests) * u128::from(period_s)).saturating_mul(1_000_000) / micros;
        let measured = u64::try_from(per_period).unwrap_or(u64::MAX);
        self.demand = if measured >= self.demand {
            measured
        } else {
            let smoothed = (u128::from(self.demand) + 3 * u128::from(measured)) / 4;
            u64::try_from(smoothed).unwrap_or(u64::MAX)
        };
    }
}

impl Limit {
    /// Re-computes the shares and pushes each one that moved.
    fn reshare(&mut self, ttl: Duration) {
        let claims: Vec<Claim> = self
            .subscribers
            .values()
            .map(|s| Claim {
                demand: s.demand,
                current: s.share,
            })
            .collect();
        let n = u64::try_from(claims.len()).unwrap_or(u64::MAX).max(1);
        let sharing = Sharing {
            floor: (self.rate.units / n / FLOOR_DIVISOR).max(1),
            headroom_percent: HEADROOM_PERCENT,
            hysteresis_percent: HYSTERESIS_PERCENT,
        };
        let mut shares = vec![0; claims.len()];
        if sharing
            .share(self.rate.units, &claims, &mut shares)
            .is_err()
        {
            return;
        }
        for standing in self.subscribers.values_mut() {
            standing.shared_demand = standing.demand;
        }
        // Shrinking shares go out before growing ones, so that a proxy reading its
        // new share never adds to an old one still live elsewhere longer than needed.
        let mut moved: Vec<(bool, &Subscriber, &mut Standing, u64)> = self
            .subscribers
            .iter_mut()
            .zip(shares)
            .filter(|((_, standing), share)| standing.share != Some(*share))
            .map(|((who, standing), share)| {
                (
                    standing.share.is_some_and(|s| s < share),
                    who,
                    standing,
                    share,
                )
            })
            .collect();
        moved.sort_by_key(|(grows, ..)| *grows);
        for (_, &(_, bucket), standing, share) in moved {
            standing.share = Some(share);
            let action = assignment(&standing.bucket, &self.rate, share, ttl);
            standing.mailbox.post(bucket, action);
        }
    }
}

/// A whole-second duration.
fn seconds(duration: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: i64::try_from(duration.as_secs()).unwrap_or(i64::MAX),
        nanos: 0,
    }
}

/// `bucket`'s assignment of `strategy` for `ttl`.
pub(super) fn assign(bucket: &BucketId, strategy: Strategy, ttl: Duration) -> BucketAction {
    BucketAction {
        bucket_id: Some(bucket.clone()),
        bucket_action: Some(Action::QuotaAssignmentAction(QuotaAssignmentAction {
            assignment_time_to_live: Some(seconds(ttl)),
            rate_limit_strategy: Some(RateLimitStrategy {
                strategy: Some(strategy),
            }),
        })),
    }
}

/// A blanket rule as a strategy.
pub(super) fn blanket(rule: BlanketRule) -> Strategy {
    Strategy::BlanketRule(rule as i32)
}

/// `bucket`'s assignment of `share` units of `rate` for `ttl`: a token bucket filling
/// `share` per period and holding its part of the burst (at least one token), or
/// `DENY_ALL` for no share.
fn assignment(bucket: &BucketId, rate: &Rate, share: u64, ttl: Duration) -> BucketAction {
    if share == 0 {
        return assign(bucket, blanket(BlanketRule::DenyAll), ttl);
    }
    let burst =
        u128::from(rate.burst).saturating_mul(u128::from(share)) / u128::from(rate.units.max(1));
    let tokens = TokenBucket {
        max_tokens: saturate(u64::try_from(burst).unwrap_or(u64::MAX)).max(1),
        tokens_per_fill: Some(saturate(share)),
        fill_interval: Some(seconds(Duration::from_secs(rate.period_s.max(1)))),
        name: String::new(),
    };
    assign(bucket, Strategy::TokenBucket(tokens), ttl)
}
