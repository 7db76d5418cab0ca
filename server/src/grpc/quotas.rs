//! The limits shared over Envoy's quota protocol: each limit's subscribers (a bucket of
//! a stream), their demand measured on this server's clock, and their shares. A report
//! only measures; [`Quotas::run`] settles each limit due (at most once a tick) with the
//! core's `share::Ledger` and pushes the shares that moved at once, shrinking ones first:
//! in this process over every subscriber, or with `--decisions` on Redis over every
//! replica's, in one script (`RedisShares`), this replica's granted only within the room
//! the others' live shares leave.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, Weak};
use std::time::Duration;

use sluicegate_core::share::{grant, Claim, Holding, Ledger};
use sluicegate_redis::{ReconnectingAsync, RedisShares, Subscription};
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

/// How every limit is shared: the floor a twentieth of an equal split, so that floors
/// idle among many subscribers waste little; 20 % over measured demand; shares move
/// only by more than 5 %.
const LEDGER: Ledger = Ledger {
    floor_divisor: 20,
    headroom_percent: 20,
    hysteresis_percent: 5,
};
/// How often the limits due are settled: a joiner waits at most this for its share.
const TICK: Duration = Duration::from_millis(100);
/// A limit shared in Redis is settled this many times per report interval with nothing
/// new here: the other replicas' moves come in, and this replica's subscribers stay
/// alive in the hash.
const RESYNCS_PER_INTERVAL: u32 = 5;

/// A bucket id's entries in name order, held once per bucket a stream holds.
pub(super) type Entries = Arc<[(Box<str>, Box<str>)]>;

/// The entries of `id` (a sorted map) in name order.
pub(super) fn entries(id: &BucketId) -> Entries {
    (id.bucket.iter())
        .map(|(k, v)| (k.as_str().into(), v.as_str().into()))
        .collect()
}

/// The bucket id of `entries`, as the proxy sent it.
pub(super) fn bucket_id(entries: &[(Box<str>, Box<str>)]) -> BucketId {
    let bucket = (entries.iter()).map(|(k, v)| (k.to_string(), v.to_string()));
    BucketId {
        bucket: bucket.collect(),
    }
}

/// A subscriber's field in a limit's hash in Redis: three numbers of 16 hex digits.
const FIELD_LEN: usize = 3 * 16 + 2;

/// A subscriber: a stream, and the proxy's number of one of its buckets.
type Subscriber = (u64, u64);

/// A subscriber's standing on one limit.
#[derive(Debug)]
struct Standing {
    bucket: Entries,
    mailbox: Arc<Mailbox>,
    /// Units per the limit's period it asked for lately (0 until measured).
    demand: u64,
    /// When its last report arrived; none before its first.
    reported: Option<Instant>,
    /// Its last target.
    target: Option<u64>,
    /// The share its stream was last sent.
    live: Option<u64>,
    /// The demand of its last settle.
    settled_demand: u64,
}

/// One shared limit.
#[derive(Debug)]
struct Limit {
    /// The policy's name or the YAML rule's id.
    name: String,
    rate: Rate,
    subscribers: BTreeMap<Subscriber, Standing>,
    /// Subscribers gone since the last settle (Redis: to be removed there).
    leaving: Vec<Subscriber>,
    /// A demand moved: settled at the next tick in this process, at the next re-settle
    /// in Redis.
    due: bool,
    /// A subscriber came or went, or the rate moved: settled at the next tick.
    urgent: bool,
    /// When it was last settled.
    settled: Option<Instant>,
    /// On Redis: when the last settle Redis took began.
    confirmed: Option<Instant>,
}

/// One bucket's use in a report, governed by a shared limit.
#[derive(Debug)]
pub(super) struct Usage {
    pub(super) bucket: u64,
    pub(super) id: Entries,
    pub(super) limit: String,
    pub(super) name: String,
    pub(super) rate: Rate,
    /// Requests allowed plus denied since its last report.
    pub(super) requests: u64,
}

/// Where the shares of every replica are settled together.
#[derive(Debug)]
struct InRedis {
    con: ReconnectingAsync,
    shares: RedisShares,
    /// How often a limit is settled with nothing new here.
    resync: Duration,
    /// How long Redis keeps a subscriber after its replica's last settle.
    kept: Duration,
    /// This replica's id, the first part of each of its subscribers' fields.
    replica: u64,
}

/// Every shared limit.
#[derive(Debug)]
pub(crate) struct Quotas {
    limits: Mutex<HashMap<String, Limit>>,
    /// How long an assignment lives: a few report intervals, whole seconds.
    ttl: Duration,
    /// Set at shutdown: how long every share sent from then on lives.
    closing: OnceLock<Duration>,
    /// `None`: shared among this process's streams only.
    redis: Option<InRedis>,
}

impl Quotas {
    /// Shares whose assignments live `ttl` (whole seconds, at least one), for proxies
    /// reporting every `interval`, settled in Redis through `con` when there is one.
    pub(crate) fn new(ttl: Duration, interval: Duration, con: Option<ReconnectingAsync>) -> Self {
        let ttl = Duration::from_secs(ttl.as_secs().max(1));
        let resync = (interval / RESYNCS_PER_INTERVAL).max(TICK);
        // A subscriber outlives its replica in the hash until its proxy's share expired,
        // and a share re-sent between two settles keeps its whole time to live.
        let kept = ttl + resync * 2 + TICK;
        let redis = con.map(|con| InRedis {
            con,
            resync,
            kept,
            shares: RedisShares::new(LEDGER, kept),
            replica: replica_id(),
        });
        Self {
            limits: Mutex::default(),
            ttl,
            closing: OnceLock::new(),
            redis,
        }
    }

    fn limits(&self) -> MutexGuard<'_, HashMap<String, Limit>> {
        self.limits.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How long an assignment lives.
    pub(super) fn ttl(&self) -> Duration {
        self.ttl
    }

    /// How long a share sent now lives: shorter once closing.
    fn share_ttl(&self) -> Duration {
        self.closing.get().copied().unwrap_or(self.ttl)
    }

    /// How long a share of `limit` re-sent at `now` may live: on Redis, no longer than
    /// Redis keeps its subscribers after the last settle it took, since the other
    /// replicas grow into their room then; `None` under a second.
    fn resend_ttl(&self, limit: &Limit, now: Instant) -> Option<Duration> {
        let ttl = self.share_ttl();
        let Some(redis) = &self.redis else {
            return Some(ttl);
        };
        let kept_until = limit.confirmed? + redis.kept;
        let left = kept_until.saturating_duration_since(now);
        let whole = Duration::from_secs(left.as_secs()).min(ttl);
        (!whole.is_zero()).then_some(whole)
    }

    /// Takes stream `stream`'s report of `usages` at `now`: each bucket's demand
    /// measured, its limit marked due if a demand moved, and each reported bucket's
    /// share re-sent to `mailbox` (a new bucket's comes with its limit's next settle).
    pub(super) fn report(
        &self,
        stream: u64,
        mailbox: &Arc<Mailbox>,
        now: Instant,
        usages: Vec<Usage>,
    ) {
        let mut limits = self.limits();
        for usage in usages {
            let limit = limits.entry(usage.limit).or_insert_with(|| Limit {
                name: usage.name,
                rate: usage.rate,
                subscribers: BTreeMap::new(),
                leaving: Vec::new(),
                due: true,
                urgent: true,
                settled: None,
                confirmed: None,
            });
            limit.urgent |= limit.rate != usage.rate;
            limit.rate = usage.rate;
            let resend_ttl = self.resend_ttl(limit, now);
            let standing = limit
                .subscribers
                .entry((stream, usage.bucket))
                .or_insert_with(|| Standing {
                    bucket: usage.id,
                    mailbox: Arc::clone(mailbox),
                    demand: 0,
                    reported: None,
                    target: None,
                    live: None,
                    settled_demand: 0,
                });
            standing.measure(now, usage.requests, limit.rate.period_s);
            // A steady report changes no share.
            limit.urgent |= standing.live.is_none();
            limit.due |= standing.moved();
            // Re-sent unchanged, so that the proxy extends it before it expires.
            let resend = standing.live.zip(resend_ttl);
            if let Some((live, ttl)) = resend {
                let action = assignment(&standing.bucket, &limit.rate, live, ttl);
                mailbox.post(usage.bucket, action);
            }
        }
    }

    /// Stream `stream` no longer holds `buckets` (each with its limit): their shares
    /// go to the limits' other subscribers at the next settle.
    pub(super) fn leave(&self, stream: u64, buckets: impl IntoIterator<Item = (String, u64)>) {
        let mut limits = self.limits();
        let in_redis = self.redis.is_some();
        for (id, bucket) in buckets {
            let Some(limit) = limits.get_mut(&id) else {
                continue;
            };
            if limit.subscribers.remove(&(stream, bucket)).is_some() {
                limit.urgent = true;
                if in_redis {
                    limit.leaving.push((stream, bucket));
                }
            }
            if limit.subscribers.is_empty() && limit.leaving.is_empty() {
                limits.remove(&id);
            }
        }
    }

    /// Shutdown: every subscriber sent its share once more with `ttl` (at most), as is
    /// every share sent after, so that proxies fall back soon; nothing is settled after,
    /// so that in Redis this replica's subscribers are not freed while their proxies
    /// still hold their shares, but expire as a dead replica's.
    pub(super) fn close(&self, ttl: Duration) {
        let limits = self.limits();
        let _ = self.closing.set(ttl);
        let now = Instant::now();
        for limit in limits.values() {
            let Some(ttl) = self.resend_ttl(limit, now) else {
                continue;
            };
            for (&(_, bucket), standing) in &limit.subscribers {
                let live = standing.live.unwrap_or(0);
                let action = assignment(&standing.bucket, &limit.rate, live, ttl);
                standing.mailbox.post(bucket, action);
            }
        }
    }

    /// Settles the limits due every [`TICK`] while `quotas` lives.
    pub(super) async fn run(quotas: Weak<Self>) {
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Some(quotas) = quotas.upgrade() else {
                return;
            };
            if quotas.closing.get().is_some() {
                return;
            }
            quotas.settle(Instant::now()).await;
        }
    }

    /// Settles every limit due at `now`.
    async fn settle(&self, now: Instant) {
        let Some(redis) = &self.redis else {
            for limit in self.limits().values_mut().filter(|l| l.due || l.urgent) {
                limit.settle_here(self.ttl);
            }
            return;
        };
        let due: Vec<String> = self
            .limits()
            .iter()
            .filter(|(_, l)| l.urgent || l.settled.is_none_or(|at| now - at >= redis.resync))
            .map(|(id, _)| id.clone())
            .collect();
        let settles = due.iter().map(|id| self.settle_in_redis(redis, id, now));
        futures_util::future::join_all(settles).await;
    }

    /// Settles limit `id` in Redis: this replica's subscribers and leavers sent, their
    /// grants pushed. While Redis is away the shares stay as they are.
    async fn settle_in_redis(&self, redis: &InRedis, id: &str, now: Instant) {
        let (units, subscribers, claims, leaving) = {
            let mut limits = self.limits();
            let Some(limit) = limits.get_mut(id) else {
                return;
            };
            (limit.due, limit.urgent) = (false, false);
            limit.settled = Some(now);
            let units = limit.rate.units;
            let subscribers: Vec<Subscriber> = limit.subscribers.keys().copied().collect();
            let claims: Vec<(u64, Option<u64>)> = (limit.subscribers.values_mut())
                .map(|s| {
                    s.settled_demand = s.demand;
                    (s.demand, s.live)
                })
                .collect();
            let leaving = std::mem::take(&mut limit.leaving);
            (units, subscribers, claims, leaving)
        };
        // Every field in one buffer: this replica's id, then the stream's and the
        // bucket's numbers, each in 16 hex digits.
        let mut fields = String::with_capacity((subscribers.len() + leaving.len()) * FIELD_LEN);
        for (stream, bucket) in subscribers.iter().chain(&leaving) {
            let _ = write!(fields, "{:016x}:{stream:016x}:{bucket:016x}", redis.replica);
        }
        let field = |i: usize| &fields[i * FIELD_LEN..(i + 1) * FIELD_LEN];
        let subscriptions: Vec<Subscription> = (claims.iter().enumerate())
            .map(|(i, &(demand, live))| Subscription {
                field: field(i),
                demand,
                live,
            })
            .collect();
        let leavers: Vec<&str> = (0..leaving.len())
            .map(|i| field(subscribers.len() + i))
            .collect();
        let key = format!("sluicegate:quota:{{{id}}}");
        let mut con = redis.con.clone();
        let settled = (redis.shares)
            .settle(&mut con, &key, units, None, &leavers, &subscriptions)
            .await;
        let mut limits = self.limits();
        let Some(limit) = limits.get_mut(id) else {
            return;
        };
        match settled {
            Ok(settled) => {
                limit.confirmed = Some(now);
                let moved = subscribers.into_iter().zip(settled);
                limit.push(
                    moved.map(|(who, (live, target))| (who, Some(target), live)),
                    self.share_ttl(),
                );
            }
            Err(error) => {
                tracing::warn!(%error, limit = %limit.name, "quota shares not settled in Redis");
                limit.leaving.extend(leaving);
            }
        }
        if limit.subscribers.is_empty() && limit.leaving.is_empty() {
            limits.remove(id);
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
        let by_name = self.by_name(|_| true);
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

impl Quotas {
    /// The figures of the policies or rules `wanted` picks, by name.
    fn by_name(&self, wanted: impl Fn(&str) -> bool) -> BTreeMap<String, Figures> {
        let mut by_name: BTreeMap<String, Figures> = BTreeMap::new();
        for limit in self.limits().values().filter(|l| wanted(&l.name)) {
            let figures = by_name.entry(limit.name.clone()).or_default();
            let per_second =
                |units: u64| u128::from(units) * 1_000_000 / u128::from(limit.rate.period_s.max(1));
            figures.subscribers += limit.subscribers.len();
            for standing in limit.subscribers.values() {
                figures.demand += per_second(standing.demand);
                figures.assigned += per_second(standing.live.unwrap_or(0));
            }
            figures.limit += per_second(limit.rate.units);
        }
        by_name
    }

    /// Policy `name`'s shares for the management page: subscribers, and demand,
    /// assigned and limit in units per second; `None` without subscribers.
    pub(super) fn figures(&self, name: &str) -> Option<serde_json::Value> {
        let figures = self.by_name(|n| n == name).remove(name)?;
        let per_second = |millionths: u128| millionths as f64 / 1e6;
        Some(serde_json::json!({
            "subscribers": figures.subscribers,
            "demand_per_s": per_second(figures.demand),
            "assigned_per_s": per_second(figures.assigned),
            "limit_per_s": per_second(figures.limit),
        }))
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
        let (was, now) = (u128::from(self.settled_demand), u128::from(self.demand));
        let by = was.abs_diff(now);
        let hysteresis = u128::from(LEDGER.hysteresis_percent);
        self.live.is_none() || (by > 1 && by * 100 > was * hysteresis)
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
    /// Settles in this process: every subscriber's target re-computed and granted.
    fn settle_here(&mut self, ttl: Duration) {
        (self.due, self.urgent) = (false, false);
        for standing in self.subscribers.values_mut() {
            standing.settled_demand = standing.demand;
        }
        let units = self.rate.units;
        let claims: Vec<Claim> = (self.subscribers.values())
            .map(|s| Claim {
                demand: s.demand,
                current: s.target,
            })
            .collect();
        let mut targets = vec![0; claims.len()];
        if LEDGER.targets(units, &claims, &mut targets).is_err() {
            return;
        }
        let mut holdings: Vec<Holding> = (self.subscribers.values().zip(targets))
            .map(|(s, target)| Holding {
                demand: s.demand,
                target: Some(target),
                live: s.live,
            })
            .collect();
        grant(units, &mut holdings, |_| true);
        let settled: Vec<_> = (self.subscribers.keys().zip(holdings))
            .map(|(&who, h)| (who, h.target, h.live.unwrap_or(0)))
            .collect();
        self.push(settled.into_iter(), ttl);
    }

    /// Records each subscriber's settled target (if known here) and live share, and
    /// pushes the shares that moved: shrinking ones first, so that a proxy reading its
    /// new share never adds to an old one still live elsewhere longer than needed.
    fn push(
        &mut self,
        settled: impl Iterator<Item = (Subscriber, Option<u64>, u64)>,
        ttl: Duration,
    ) {
        let mut moved = Vec::new();
        for (who, target, live) in settled {
            let Some(standing) = self.subscribers.get_mut(&who) else {
                continue;
            };
            standing.target = target;
            if standing.live != Some(live) {
                let grows = standing.live.is_some_and(|l| l < live);
                standing.live = Some(live);
                moved.push((grows, who));
            }
        }
        moved.sort_by_key(|(grows, _)| *grows);
        for (_, who) in moved {
            if let Some(standing) = self.subscribers.get(&who) {
                let live = standing.live.unwrap_or(0);
                let action = assignment(&standing.bucket, &self.rate, live, ttl);
                standing.mailbox.post(who.1, action);
            }
        }
    }
}

/// A random id for this replica's subscribers in Redis.
fn replica_id() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one((std::process::id(), std::time::SystemTime::now()))
}

/// A whole-second duration.
fn seconds(duration: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: i64::try_from(duration.as_secs()).unwrap_or(i64::MAX),
        nanos: 0,
    }
}

/// `bucket`'s assignment of `strategy` for `ttl`.
pub(super) fn assign(bucket: &Entries, strategy: Strategy, ttl: Duration) -> BucketAction {
    BucketAction {
        bucket_id: Some(bucket_id(bucket)),
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
fn assignment(bucket: &Entries, rate: &Rate, share: u64, ttl: Duration) -> BucketAction {
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
