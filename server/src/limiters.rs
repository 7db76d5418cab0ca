//! The limiters: one per policy, in this process (bounded keyed limiters) or in
//! Redis (`--decisions redis://…`, shared by a fleet), rebuilt only when a policy's
//! parameters change, so editing its apps or description keeps its counts.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::mem::discriminant;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use sluicegate_core::memory::{AcquireError, KeyedLeases, KeyedLimiter, OnFull};
use sluicegate_core::{
    AnyAlgorithm, Concurrency, Decision, FailPolicy, Grant, LeaseError, LeaseRequest, Outcome,
    ReportRequest, Reported, Request, Ticks, SECOND,
};
use sluicegate_policy::{Built, Policy, Style};
use sluicegate_redis::{ReconnectingAsync, RedisLeases, RedisLimiter};

use crate::coalesce::{self, Coalescer};
use crate::metrics::{Counters, Metrics, Table};

/// The longest key, in bytes.
pub(crate) const MAX_KEY: usize = 1024;

/// How many keys a policy's table holds in this process. A full table forgets keys that
/// would admit a request first, fresh soonest first, then does as the policy's
/// `on_full` says.
#[derive(Debug, Clone, Copy)]
pub struct Keys {
    /// Keys per policy (`--max-keys`).
    pub max_keys: usize,
    /// Bytes per policy's limiter at the worst (`--max-policy-bytes`): a sliding log
    /// of a large limit gets fewer keys.
    pub max_policy_bytes: usize,
}

impl Keys {
    /// The key cap of a limiter deciding `rule`: `max_keys`, lowered so that its keys,
    /// each as long as the service accepts, fit in `max_policy_bytes`.
    fn of(self, rule: &AnyAlgorithm) -> usize {
        let within = KeyedLimiter::<String, AnyAlgorithm>::max_keys_within(
            rule,
            self.max_policy_bytes,
            MAX_KEY,
        );
        self.max_keys.min(within)
    }

    /// A limiter deciding `rule`, doing as `on_full` says when full.
    fn limiter(self, rule: &AnyAlgorithm, on_full: OnFull) -> KeyedLimiter<String, AnyAlgorithm> {
        KeyedLimiter::new(rule.clone(), self.of(rule)).on_full(on_full)
    }
}

/// Where decisions are kept.
#[derive(Debug, Clone)]
pub enum Backend {
    /// In this process.
    Memory(Keys),
    /// In Redis.
    Redis {
        /// The connection (reconnects by itself, bounded timeouts), for leases.
        con: ReconnectingAsync,
        /// Decisions, sent together when they arrive together.
        coalescer: Coalescer,
        /// The answer while Redis is unreachable (`--fail`; `Local` builds a limiter per
        /// policy).
        fail: FailPolicy<()>,
        /// Keys kept per policy by the local fallback.
        keys: Keys,
    },
}

/// One policy's limiter and the headers it stamps.
#[derive(Debug)]
pub struct Entry {
    /// What the policy builds: its limiter is rebuilt only when this or `on_full`
    /// changes.
    pub built: Built,
    /// What the policy's full key table does (in this process).
    on_full: OnFull,
    /// `RateLimit-Policy` for this policy.
    pub header: Option<sluicegate_tower::Policy>,
    limiter: Limiter,
    /// The policy's counters in the metrics (kept when the limiter is rebuilt).
    counters: Arc<Counters>,
    /// The policy's limit (or capacity) and period, for the next change to carry.
    limit: u64,
    period: Ticks,
    /// After a change of its parameters, the limiter before it, still counting.
    carried: Option<Carried>,
}

/// A policy's limiter before a change of its parameters (same algorithm, in this
/// process or in Redis), kept for one of its periods: a key's use under the old
/// parameters still counts, so nothing is admitted above the old limit within its
/// window, nor above the new one (the old limiter must keep `lower_by` more room when
/// the limit drops).
#[derive(Debug)]
struct Carried {
    old: Mutex<Option<Arc<Entry>>>,
    /// When the old limiter's last window has passed.
    until: Instant,
    /// Set once the old limiter is dropped: every later decision reads this flag
    /// alone, neither the clock nor the lock.
    dropped: AtomicBool,
    /// How much lower the new limit is than the old.
    lower_by: u64,
    /// In this process, one decision at a time per stripe of keys while the old limiter
    /// counts, so that its peek and its count are one step for racing requests.
    stripes: [tokio::sync::Mutex<()>; STRIPES],
}

/// Stripes of keys decided one at a time during a change (see [`Carried`]).
const STRIPES: usize = 64;

impl Carried {
    /// The stripe of `key`.
    fn stripe(&self, key: &str) -> &tokio::sync::Mutex<()> {
        let mut hasher = std::hash::DefaultHasher::new();
        std::hash::Hash::hash(key, &mut hasher);
        let hash = std::hash::Hasher::finish(&hasher);
        // Below STRIPES: the remainder of a division by it.
        let index = usize::try_from(hash % STRIPES as u64).unwrap_or(0);
        &self.stripes[index]
    }

    /// The old limiter while it still counts; dropped once its window has passed.
    fn old(&self) -> Option<Arc<Entry>> {
        if self.dropped.load(Ordering::Relaxed) {
            return None;
        }
        let mut old = self.old.lock().unwrap_or_else(PoisonError::into_inner);
        if Instant::now() >= self.until {
            *old = None;
            self.dropped.store(true, Ordering::Relaxed);
        }
        old.clone()
    }
}

impl Entry {
    /// The change of parameters this entry follows and the entry before it, while it
    /// still counts.
    fn carried(&self) -> Option<(&Carried, Arc<Entry>)> {
        let carried = self.carried.as_ref()?;
        Some((carried, carried.old()?))
    }
}

/// Decides on the new limiter while the one before a change still counts: `room` is the
/// old limiter's peek at the cost plus how much lower the new limit is, `new` the new
/// limiter's decision (taken only if the old has room), `count_old` counts the cost in
/// the old one (only if the new admits). The futures are lazy: each runs only if it is
/// reached, so the memory and Redis hosts share this order.
async fn check_carried<E>(
    room: impl Future<Output = Result<Decision, E>>,
    new: impl Future<Output = Result<Decision, E>>,
    count_old: impl Future<Output = Result<Decision, E>>,
    new_limit: u64,
) -> Result<Decision, E> {
    let room = room.await?;
    if !room.allowed {
        return Ok(Decision::deny(
            new_limit,
            0,
            room.retry_after,
            room.reset_after,
        ));
    }
    let mut decision = new.await?;
    if decision.allowed {
        // Admitted by the new limiter, whatever the count in the old one answers (in
        // Redis a racing request may have filled it since the peek), or fails.
        let _ = count_old.await;
        decision.remaining = decision.remaining.min(room.remaining);
    }
    Ok(decision)
}

#[derive(Debug)]
enum Limiter {
    Memory(KeyedLimiter<String, AnyAlgorithm>),
    /// Shared with the decisions queued for Redis.
    Redis {
        limiter: Arc<RedisLimiter<AnyAlgorithm>>,
        /// The answer while Redis is unreachable, with its own limiter for `--fail local`.
        fail: FailPolicy<KeyedLimiter<String, AnyAlgorithm>>,
    },
    /// A concurrency policy's lease tables in this process, at most `max_keys` keys.
    MemoryLeases(KeyedLeases<String>),
    RedisLeases(RedisLeases),
}

/// A lease operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseOp {
    /// Take a lease (or re-enter the one held).
    Acquire,
    /// Give one hold back.
    Release,
    /// Extend an unexpired lease.
    Renew,
}

/// What a lease operation did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseAnswer {
    /// Acquired: the lease.
    Granted(Grant),
    /// Denied: every lease is held (or, in this process, every table in use); the
    /// decision's `retry_after` says when one expires.
    Busy(Decision),
    /// Released or renewed: the lease as it stands.
    Held(Grant),
    /// The owner holds no unexpired lease.
    NotHeld,
}

/// Why a decision could not be made.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum DecideError {
    /// The policy is a concurrency limit.
    #[error("policy {0:?} is a concurrency limit: use /v1/lease/acquire, release and renew")]
    Leases(String),
    /// Redis is unreachable and the fail policy is to say so.
    #[error("the decision backend is unavailable: {0}")]
    Unavailable(String),
    /// Redis refused (a key holding something else, a parameter beyond the scripts).
    #[error("{0}")]
    Backend(String),
    /// The policy is a rate limit, not leases.
    #[error("policy {0:?} is a rate limit: use /v1/decide")]
    Rate(String),
    /// A lease argument is out of range (the owner's length, the ttl).
    #[error("{0}")]
    Lease(LeaseError),
    /// The policy's algorithm takes no reports (a pacing queue, a ban).
    #[error("policy {0:?} cannot take reports: a pacing queue's slots are already handed out, and a ban counts no requests")]
    NoReports(String),
}

impl Entry {
    /// The limiter for the policy `name` on `backend`, or `previous` if its parameters
    /// are the same; its decisions count into `metrics`.
    pub(crate) fn build(
        name: &str,
        policy: &Policy,
        backend: &Backend,
        previous: Option<&Arc<Self>>,
        metrics: &Metrics,
    ) -> Result<Arc<Self>, String> {
        let built = policy.build(Style::File).map_err(|p| p.to_string())?;
        let on_full = policy.on_full.unwrap_or_default();
        if let Some(previous) = previous.filter(|p| p.built == built && p.on_full == on_full) {
            return Ok(Arc::clone(previous));
        }
        let header = sluicegate_tower::Policy::new(
            name,
            policy.limit(),
            Duration::from_micros(policy.period()),
        )
        .ok();
        let limiter = match (&built, backend) {
            (Built::Leases { model, .. }, Backend::Memory(keys)) => {
                Limiter::MemoryLeases(KeyedLeases::new(*model, keys.max_keys))
            }
            (Built::Leases { model, .. }, Backend::Redis { .. }) => {
                Limiter::RedisLeases(RedisLeases::new(*model).with_prefix(prefix(name, policy)))
            }
            (Built::Rule(rule), Backend::Memory(keys)) => {
                Limiter::Memory(keys.limiter(rule, on_full))
            }
            (Built::Rule(rule), Backend::Redis { fail, keys, .. }) => {
                let limiter = RedisLimiter::new(rule.clone())
                    .map_err(|e| e.to_string())?
                    .with_prefix(prefix(name, policy));
                let fail = match fail {
                    FailPolicy::Local(()) => FailPolicy::Local(keys.limiter(rule, on_full)),
                    FailPolicy::Open => FailPolicy::Open,
                    FailPolicy::Closed => FailPolicy::Closed,
                    _ => FailPolicy::Error,
                };
                Limiter::Redis {
                    limiter: Arc::new(limiter),
                    fail,
                }
            }
            _ => return Err(format!("policy {name:?}: this server cannot run it")),
        };
        // The same algorithm: the old limiter (in this process or its keys in Redis) still
        // counts.
        let carried = previous
            .filter(|p| match (&p.built, &built) {
                (Built::Rule(a), Built::Rule(b)) => discriminant(a) == discriminant(b),
                _ => false,
            })
            .filter(|p| matches!(p.limiter, Limiter::Memory(_) | Limiter::Redis { .. }))
            .map(|p| Carried {
                old: Mutex::new(Some(Arc::clone(p))),
                until: Instant::now() + Duration::from_micros(p.period),
                dropped: AtomicBool::new(false),
                lower_by: p.limit.saturating_sub(policy.limit()),
                stripes: std::array::from_fn(|_| tokio::sync::Mutex::new(())),
            });
        Ok(Arc::new(Self {
            built,
            on_full,
            header,
            limiter,
            counters: metrics.counters(name),
            limit: policy.limit(),
            period: policy.period(),
            carried,
        }))
    }

    /// The policy's counters in the metrics.
    pub(crate) fn counters(&self) -> &Counters {
        &self.counters
    }

    /// The fill of the policy's key table in this process (its limiter, its lease table
    /// or its `--fail local` fallback), if it has one.
    pub(crate) fn table(&self) -> Option<Table> {
        let keyed = |l: &KeyedLimiter<String, AnyAlgorithm>| Table {
            keys: l.len(),
            capacity: l.capacity(),
            evicted: l.evicted(),
            refused: l.refused(),
        };
        match &self.limiter {
            Limiter::Memory(limiter)
            | Limiter::Redis {
                fail: FailPolicy::Local(limiter),
                ..
            } => Some(keyed(limiter)),
            // A lease table forgets expired leases only.
            Limiter::MemoryLeases(leases) => Some(Table {
                keys: leases.len(),
                capacity: leases.capacity(),
                evicted: 0,
                refused: leases.refused(),
            }),
            Limiter::Redis { .. } | Limiter::RedisLeases(_) => None,
        }
    }

    /// Decides `cost` units for `key`.
    pub async fn decide(
        &self,
        backend: &Backend,
        name: &str,
        key: &str,
        cost: u64,
    ) -> Result<Decision, DecideError> {
        match (&self.limiter, backend) {
            (Limiter::Memory(limiter), _) => Ok(match &self.carried() {
                Some((carried, old)) if let Limiter::Memory(old) = &old.limiter => {
                    let _serial = carried.stripe(key).lock().await;
                    let room = cost.saturating_add(carried.lower_by);
                    let decided = check_carried(
                        async { Ok::<_, Infallible>(old.peek(key, room)) },
                        async { Ok(limiter.check(key, cost)) },
                        async { Ok(old.check(key, cost)) },
                        limit_of(limiter.algorithm()),
                    );
                    let Ok(decision) = decided.await;
                    decision
                }
                _ => limiter.check(key, cost),
            }),
            (Limiter::Redis { limiter, fail }, Backend::Redis { coalescer, con, .. }) => {
                let new = async {
                    coalescer
                        .check(limiter, key.as_bytes(), cost)
                        .await
                        .map_err(|e| match e {
                            coalesce::Error::Redis(e) => typed(e),
                            coalesce::Error::Stopped => DecideError::Backend(e.to_string()),
                        })
                };
                let result = match &self.carried() {
                    Some((carried, old))
                        if let Limiter::Redis { limiter: old, .. } = &old.limiter =>
                    {
                        // In Redis the peek and the count are two calls: requests
                        // racing on one key may each pass the peek (see the guide).
                        let room = cost.saturating_add(carried.lower_by);
                        let room = Request::new(key.as_bytes()).cost(room);
                        let (mut peek_con, mut count_con) = (con.clone(), con.clone());
                        check_carried(
                            async { old.peek_async(&mut peek_con, &room).await.map_err(typed) },
                            new,
                            async {
                                old.check_async(&mut count_con, key.as_bytes(), cost)
                                    .await
                                    .map_err(typed)
                            },
                            limit_of(limiter.algorithm()),
                        )
                        .await
                    }
                    _ => new.await,
                };
                let unreachable = |e: &DecideError| matches!(e, DecideError::Unavailable(_));
                let limit = || limit_of(limiter.algorithm());
                // Redis away and failing open or closed: say nothing beyond the verdict
                // (no budget is known).
                Ok(
                    match fail.apply(result, unreachable, |local| local.check(key, cost))? {
                        Outcome::Decided(decision) | Outcome::Local(decision, _) => decision,
                        Outcome::Open(_) => Decision::admit(limit(), 0, 0, 0),
                        Outcome::Closed(_) => Decision::deny(limit(), 0, Some(SECOND), SECOND),
                    },
                )
            }
            (Limiter::Redis { .. }, Backend::Memory(_)) => Err(DecideError::Backend(
                "the policy was built for another backend".into(),
            )),
            (Limiter::MemoryLeases(_) | Limiter::RedisLeases(_), _) => {
                Err(DecideError::Leases(name.to_owned()))
            }
        }
    }

    /// Whether this policy (`name`) takes reports: checked before a report's id is
    /// claimed, so that a claimed report is always applied.
    pub fn check_report(&self, name: &str) -> Result<(), DecideError> {
        match &self.limiter {
            Limiter::Memory(limiter) if limiter.algorithm().can_report() => Ok(()),
            Limiter::Redis { limiter, .. } if limiter.algorithm().can_report() => Ok(()),
            Limiter::MemoryLeases(_) | Limiter::RedisLeases(_) => {
                Err(DecideError::Leases(name.to_owned()))
            }
            Limiter::Memory(_) | Limiter::Redis { .. } => {
                Err(DecideError::NoReports(name.to_owned()))
            }
        }
    }

    /// Reports `adjustment` units for `key` (negative: a refund), after the work: on
    /// the limiter before a change of parameters too, while it still counts. On Redis
    /// the fail policy does not apply: a report while Redis is away is an error (503),
    /// which the caller may retry with the same id.
    pub async fn report(
        &self,
        backend: &Backend,
        name: &str,
        key: &str,
        adjustment: i64,
    ) -> Result<Reported, DecideError> {
        self.check_report(name)?;
        match (&self.limiter, backend) {
            (Limiter::Memory(limiter), _) => {
                if let Some((_, old)) = self.carried() {
                    if let Limiter::Memory(old) = &old.limiter {
                        old.report(key, adjustment);
                    }
                }
                Ok(limiter.report(key, adjustment))
            }
            (Limiter::Redis { limiter, .. }, Backend::Redis { con, .. }) => {
                let request = ReportRequest::new(key).adjust(adjustment);
                if let Some((_, old)) = self.carried() {
                    if let Limiter::Redis { limiter: old, .. } = &old.limiter {
                        // Counted in the old limiter too; the new one's report is the answer.
                        let _ = old.report_async(&mut con.clone(), &request).await;
                    }
                }
                limiter
                    .report_async(&mut con.clone(), &request)
                    .await
                    .map_err(typed)
            }
            _ => Err(DecideError::Backend(
                "the policy was built for another backend".into(),
            )),
        }
    }

    /// The policy's lease ttl (its `lease`), for calls that give none.
    pub fn lease_ttl(&self) -> Option<Ticks> {
        match self.built {
            Built::Leases { ttl, .. } => Some(ttl),
            _ => None,
        }
    }

    /// Acquires, releases or renews `owner`'s lease on `key` (for `ttl` ticks).
    pub async fn lease(
        &self,
        backend: &Backend,
        name: &str,
        op: LeaseOp,
        key: &str,
        owner: &str,
        ttl: Ticks,
    ) -> Result<LeaseAnswer, DecideError> {
        let owner = owner.as_bytes();
        Concurrency::check(owner, ttl).map_err(DecideError::Lease)?;
        let held = |result: Result<Grant, LeaseError>| match result {
            Ok(grant) => Ok(LeaseAnswer::Held(grant)),
            Err(LeaseError::NotHeld) => Ok(LeaseAnswer::NotHeld),
            Err(e) => Err(DecideError::Lease(e)),
        };
        match (&self.limiter, backend) {
            (Limiter::MemoryLeases(leases), _) => match op {
                LeaseOp::Acquire => match leases.acquire_by(key, owner, ttl) {
                    Ok(grant) => Ok(LeaseAnswer::Granted(grant)),
                    Err(AcquireError::Busy(decision)) => Ok(LeaseAnswer::Busy(decision)),
                    Err(AcquireError::Lease(e)) => Err(DecideError::Lease(e)),
                    Err(e) => Err(DecideError::Backend(e.to_string())),
                },
                LeaseOp::Release => held(leases.release_by(key, owner)),
                LeaseOp::Renew => held(leases.renew_by(key, owner, ttl)),
            },
            (Limiter::RedisLeases(leases), Backend::Redis { con, .. }) => {
                let mut con = con.clone();
                let request = LeaseRequest::new(key).owner(owner).ttl(ttl);
                let result = match op {
                    LeaseOp::Acquire => {
                        let acquired = leases.acquire_async(&mut con, &request).await;
                        return acquired
                            .map(|a| {
                                a.grant
                                    .map_or(LeaseAnswer::Busy(a.decision), LeaseAnswer::Granted)
                            })
                            .map_err(typed);
                    }
                    LeaseOp::Release => leases.release_async(&mut con, &request).await,
                    LeaseOp::Renew => leases.renew_async(&mut con, &request).await,
                };
                match result {
                    Ok(grant) => Ok(LeaseAnswer::Held(grant)),
                    Err(sluicegate_redis::Error::Lease(LeaseError::NotHeld)) => {
                        Ok(LeaseAnswer::NotHeld)
                    }
                    Err(e) => Err(typed(e)),
                }
            }
            (Limiter::RedisLeases(_), Backend::Memory(_)) => Err(DecideError::Backend(
                "the policy was built for another backend".into(),
            )),
            (Limiter::Memory(_) | Limiter::Redis { .. }, _) => {
                Err(DecideError::Rate(name.to_owned()))
            }
        }
    }
}

/// A Redis error as the decision's error.
fn typed(e: sluicegate_redis::Error) -> DecideError {
    match e {
        sluicegate_redis::Error::Lease(e) => DecideError::Lease(e),
        e if e.is_unavailable() => DecideError::Unavailable(e.to_string()),
        e => DecideError::Backend(e.to_string()),
    }
}

/// Whether `policy` can run on `backend`: on Redis, within the scripts' exact range
/// (narrower than the core's). The error names the field at fault when there is one.
pub fn check_backend(policy: &Policy, backend: &Backend) -> Result<(), (Option<String>, String)> {
    let (Backend::Redis { .. }, Ok(Built::Rule(rule))) = (backend, policy.build(Style::File))
    else {
        return Ok(());
    };
    RedisLimiter::new(rule).map(drop).map_err(|e| {
        let field = match &e {
            sluicegate_redis::Error::OutOfRange { what, .. }
                if matches!(*what, "limit" | "capacity" | "rate" | "period") =>
            {
                Some((*what).to_owned())
            }
            _ => None,
        };
        (
            field,
            format!("this server decides in Redis, whose scripts take less: {e}"),
        )
    })
}

/// The limit `algorithm`'s decisions report: a fresh key's decision costs nothing and
/// names it.
fn limit_of(algorithm: &AnyAlgorithm) -> u64 {
    use sluicegate_core::Algorithm;
    algorithm.peek(None, 0, 0).limit
}

/// Redis keys of policy `name`: `sluicegate:serve:NAME:HASH:KEY`, where HASH is of the
/// parameters only: a change of them writes new states, the old ones counting for one
/// more period (see [`Carried`]) and then expiring; a change of apps or description
/// keeps them.
fn prefix(name: &str, policy: &Policy) -> String {
    let params = Policy {
        apps: Vec::new(),
        description: String::new(),
        owner: String::new(),
        fleet: None,
        // None of these changes what Redis holds.
        on_full: None,
        shadow: false,
        max_lease: None,
        ..policy.clone()
    };
    let digest = Sha256::digest(
        serde_json::to_string(&params)
            .unwrap_or_default()
            .as_bytes(),
    );
    let hash: String = digest[..6].iter().map(|b| format!("{b:02x}")).collect();
    format!("sluicegate:serve:{name}:{hash}:")
}

/// The limiters of every policy, by name.
pub type Limiters = HashMap<String, Arc<Entry>>;

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use sluicegate_policy::{Duration, Kind, Policy};

    use super::{Backend, Entry, Keys, Limiter};
    use crate::metrics::Metrics;

    fn window(limit: u64) -> Policy {
        let hour = Some(Duration(3_600_000_000));
        Policy::from_flags(Kind::FixedWindow, Some(limit), None, None, hour)
    }

    fn memory() -> Backend {
        Backend::Memory(Keys {
            max_keys: 1000,
            max_policy_bytes: 1 << 20,
        })
    }

    /// `policy` built after `previous` (a change of its parameters).
    fn build(policy: &Policy, previous: Option<&Arc<Entry>>) -> Arc<Entry> {
        Entry::build("p", policy, &memory(), previous, &Metrics::default()).unwrap()
    }

    async fn admitted(entry: &Entry, n: usize) -> usize {
        let mut count = 0;
        for _ in 0..n {
            let decision = entry.decide(&memory(), "p", "k", 1).await.unwrap();
            count += usize::from(decision.allowed);
        }
        count
    }

    /// What the new limiter itself holds for the key: a request the old limiter
    /// refused counts in neither.
    fn new_remaining(entry: &Entry) -> u64 {
        match &entry.limiter {
            Limiter::Memory(limiter) => limiter.peek("k", 0).remaining,
            _ => unreachable!("a memory backend builds memory limiters"),
        }
    }

    #[tokio::test]
    async fn a_request_the_old_limit_refuses_is_counted_nowhere() {
        let old = build(&window(3), None);
        assert_eq!(admitted(&old, 3).await, 3);
        let new = build(&window(5), Some(&old));
        assert_eq!(admitted(&new, 4).await, 0);
        assert_eq!(new_remaining(&new), 5);
    }

    /// While the old limiter counts, a decision waits for its key's stripe, so that
    /// two requests racing on two threads cannot both pass the old limiter's peek
    /// before either counts.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_decision_during_a_change_holds_its_keys_stripe() {
        let old = build(&window(3), None);
        let new = build(&window(5), Some(&old));
        let carried = new.carried.as_ref().unwrap();
        let held = carried.stripe("k").lock().await;
        let waiting = {
            let new = Arc::clone(&new);
            tokio::spawn(async move { admitted(&new, 1).await })
        };
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "decided while its stripe was held");
        drop(held);
        assert_eq!(waiting.await.unwrap(), 1);
    }
}
