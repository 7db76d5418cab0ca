//! Decisions in Redis (`--decisions redis://…`), shared by a fleet: each policy's
//! limiter with the connection it calls through, its decisions coalesced into
//! pipelines, and the fail policy's answer while Redis is away.

use std::future::Future;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use opentelemetry::KeyValue;
use sha2::{Digest, Sha256};
use sluicegate_core::memory::OnFull;
use sluicegate_core::rwlock::{RwLease, RwState};
use sluicegate_core::{
    AnyAlgorithm, AnyState, AsyncReporter, Decision, FailPolicy, LeaseRequest, Outcome,
    ReportRequest, Reported, Request, Ticks,
};
use sluicegate_policy::Policy;
use sluicegate_redis::{ConnectedAsync, HeldChange, ReconnectingAsync, RedisLimiter, RedisRwLock};

use super::backend::{
    Backend, DecideError, LeaseAnswer, LeaseOp, LeaseTable, RateLimit, Unsupported,
};
use super::coalesce::{self, Coalescer, ConnectedLimiter};
use super::memory::{table, Keyed, Keys};
use crate::limitador::{InMemory, InRedisCounters};
use crate::metrics::Table;
use crate::telemetry;

/// The Redis backend.
#[derive(Debug, Clone)]
pub(crate) struct InRedis {
    /// The connection (reconnects by itself, bounded timeouts).
    con: ReconnectingAsync,
    /// Decisions, sent together when they arrive together.
    coalescer: Coalescer,
    /// The answer while Redis is unreachable (`--fail`; `Local` builds a limiter per
    /// policy, with `keys`).
    fail: FailPolicy<()>,
    keys: Keys,
}

impl InRedis {
    /// Decisions through `con`, answered by `fail` while Redis is unreachable.
    pub(crate) fn new(con: ReconnectingAsync, fail: FailPolicy<()>, keys: Keys) -> Self {
        let coalescer = Coalescer::start(con.clone());
        Self {
            con,
            coalescer,
            fail,
            keys,
        }
    }
}

impl Backend for InRedis {
    fn name(&self) -> &'static str {
        "redis"
    }

    #[cfg(feature = "grpc")]
    fn redis(&self) -> Option<ReconnectingAsync> {
        Some(self.con.clone())
    }

    fn rate(
        &self,
        name: &str,
        policy: &Policy,
        rule: &AnyAlgorithm,
    ) -> Result<Arc<dyn RateLimit>, Unsupported> {
        let limiter = RedisLimiter::new(rule.clone())
            .map_err(unsupported)?
            .with_prefix(prefix(name, policy));
        let on_full = policy.on_full.unwrap_or_default();
        let fail = match &self.fail {
            FailPolicy::Local(()) => FailPolicy::Local(self.keys.limiter(rule, on_full)),
            FailPolicy::Open => FailPolicy::Open,
            FailPolicy::Closed => FailPolicy::Closed,
            _ => FailPolicy::Error,
        };
        Ok(Arc::new(Shared {
            limiter: Arc::new(ConnectedAsync::new(limiter, self.con.clone())),
            con: self.con.clone(),
            coalescer: self.coalescer.clone(),
            fail,
        }))
    }

    /// A write of a key of its own accepted, within the connection's timeout (a demoted
    /// primary answering `READONLY`, or one at `maxmemory`, answers `PING` but refuses
    /// every decision); always ready under `--fail open|closed|local`, which answer
    /// every decision while Redis is away.
    fn ready(&self) -> BoxFuture<'_, Result<(), DecideError>> {
        let mut con = self.con.clone();
        let answers_anyway = !matches!(self.fail, FailPolicy::Error);
        Box::pin(async move {
            if answers_anyway {
                return Ok(());
            }
            redis::cmd("SET")
                .arg(READY_KEY)
                .arg(1)
                .arg("PX")
                .arg(READY_KEY_TTL_MS)
                .query_async::<()>(&mut con)
                .await
                .map_err(|e| DecideError::Unavailable(e.to_string()))
        })
    }

    fn leases(&self, name: &str, policy: &Policy, lock: RwLease) -> Arc<dyn LeaseTable> {
        let lock = RedisRwLock::new(lock).with_prefix(prefix(name, policy));
        Arc::new(RedisLocks {
            lock,
            con: self.con.clone(),
        })
    }

    /// Within the scripts' exact range, narrower than the core's.
    fn supports(&self, rule: &AnyAlgorithm) -> Result<(), Unsupported> {
        RedisLimiter::new(rule.clone())
            .map(drop)
            .map_err(unsupported)
    }

    fn metrics(&self) -> String {
        self.coalescer.sent().render()
    }

    fn counters(&self) -> Arc<dyn crate::limitador::Counters> {
        let fail = match &self.fail {
            FailPolicy::Local(()) => FailPolicy::Local(InMemory::new(self.keys.max_keys)),
            FailPolicy::Open => FailPolicy::Open,
            FailPolicy::Closed => FailPolicy::Closed,
            _ => FailPolicy::Error,
        };
        let coalescer = self.coalescer.sibling();
        Arc::new(InRedisCounters::new(self.con.clone(), coalescer, fail))
    }

    /// The same Redis, its `--fail local` tables a share of a policy's.
    fn share(&self, parts: usize) -> Option<Box<dyn Backend>> {
        let keys = self.keys.share(parts);
        Some(Box::new(Self {
            keys,
            ..self.clone()
        }))
    }
}

/// A rule beyond the scripts, naming the field at fault when there is one.
fn unsupported(e: sluicegate_redis::Error) -> Unsupported {
    let field = match &e {
        sluicegate_redis::Error::OutOfRange { what, .. }
            if matches!(*what, "limit" | "capacity" | "rate" | "period") =>
        {
            Some(*what)
        }
        _ => None,
    };
    Unsupported {
        field,
        why: format!("this server decides in Redis, whose scripts take less: {e}"),
    }
}

/// A rate policy's limiter in Redis.
#[derive(Debug)]
struct Shared {
    /// Shared with the decisions queued for Redis.
    limiter: Arc<ConnectedLimiter>,
    /// For the calls the host contract does not cover (carrying a key's state).
    con: ReconnectingAsync,
    coalescer: Coalescer,
    /// The answer while Redis is unreachable, with its own limiter for `--fail local`.
    fail: FailPolicy<Keyed>,
}

impl Shared {
    /// `result` as the fail policy answers it while Redis is unreachable.
    fn fail_safe(
        &self,
        result: Result<Decision, DecideError>,
        request: Request<'_>,
    ) -> Result<Outcome<()>, DecideError> {
        let unreachable = |e: &DecideError| matches!(e, DecideError::Unavailable(_));
        let local = |local: &Keyed| local.check(request.key, request.cost);
        let outcome = self.fail.apply(result, unreachable, local)?;
        if let Some(e) = outcome.error() {
            tracing::warn!(error = %e, "Redis unreachable: deciding by --fail");
        }
        Ok(match outcome {
            Outcome::Decided(decision) => Outcome::Decided(decision),
            Outcome::Local(decision, _) => Outcome::Local(decision, ()),
            Outcome::Open(_) => Outcome::Open(()),
            Outcome::Closed(_) => Outcome::Closed(()),
        })
    }
}

/// How a trace describes a round trip to Redis.
fn round_trip<T, E: std::fmt::Display>(result: &Result<T, E>) -> Vec<KeyValue> {
    let mut attributes = vec![KeyValue::new("db.system.name", "redis")];
    if let Err(e) = result {
        attributes.push(KeyValue::new(
            "error.type",
            telemetry::clipped(&e.to_string()),
        ));
    }
    attributes
}

/// `future`'s error as the decision's.
async fn typed<T>(
    future: impl Future<Output = Result<T, sluicegate_redis::Error>>,
) -> Result<T, DecideError> {
    future.await.map_err(Into::into)
}

impl RateLimit for Shared {
    fn check<'a>(
        &'a self,
        request: Request<'a>,
    ) -> BoxFuture<'a, Result<Outcome<()>, DecideError>> {
        Box::pin(async move {
            let sent = self
                .coalescer
                .check(&self.limiter, request.key, request.cost);
            let result = telemetry::child("redis", sent, round_trip)
                .await
                .map_err(|e| match e {
                    coalesce::Error::Redis(e) => e.into(),
                    coalesce::Error::Stopped => DecideError::Backend(e.to_string()),
                });
            self.fail_safe(result, request)
        })
    }

    /// The fail policy does not apply: a report while Redis is away is an error (503),
    /// which the caller may retry with the same id.
    fn report<'a>(
        &'a self,
        request: ReportRequest<'a>,
    ) -> BoxFuture<'a, Result<Reported, DecideError>> {
        Box::pin(async move {
            let sent = AsyncReporter::report(&*self.limiter, &request);
            typed(telemetry::child("redis", sent, round_trip)).await
        })
    }

    fn remove_state<'a>(
        &'a self,
        key: &'a [u8],
    ) -> BoxFuture<'a, Result<Option<(AnyState, Ticks)>, DecideError>> {
        let mut con = self.con.clone();
        Box::pin(typed(async move {
            self.limiter
                .host()
                .remove_state_async(&mut con, key, None)
                .await
        }))
    }

    fn seed_state<'a>(
        &'a self,
        key: &'a [u8],
        state: AnyState,
    ) -> BoxFuture<'a, Result<(), DecideError>> {
        let mut con = self.con.clone();
        Box::pin(typed(async move {
            let host = self.limiter.host();
            host.seed_state_async(&mut con, key, &state, None)
                .await
                .map(drop)
        }))
    }

    fn algorithm(&self) -> &AnyAlgorithm {
        self.limiter.host().algorithm()
    }

    /// The `--fail local` fallback's table.
    fn table(&self) -> Option<Table> {
        match &self.fail {
            FailPolicy::Local(local) => Some(table(local)),
            _ => None,
        }
    }
}

/// A policy's locks in Redis, each call one script over the shared connection.
#[derive(Debug)]
struct RedisLocks {
    lock: RedisRwLock,
    con: ReconnectingAsync,
}

impl LeaseTable for RedisLocks {
    fn lease<'a>(
        &'a self,
        op: LeaseOp,
        request: LeaseRequest<'a>,
    ) -> BoxFuture<'a, Result<LeaseAnswer, DecideError>> {
        Box::pin(async move {
            let (lock, con) = (&self.lock, &mut self.con.clone());
            let change = match op {
                LeaseOp::Acquire { mode, wait } => {
                    let acquired = lock.acquire_async(con, &request, mode, wait).await?;
                    return Ok(LeaseAnswer::acquired(acquired.answer));
                }
                LeaseOp::Withdraw => {
                    let withdrawn = lock.withdraw_async(con, &request).await;
                    return LeaseAnswer::withdrawn(withdrawn.map(drop));
                }
                LeaseOp::Release => HeldChange::Release,
                LeaseOp::Renew => HeldChange::Renew,
            };
            let changed = lock.change_async(con, &request, change).await;
            LeaseAnswer::held(changed.map(|handed| handed.answer))
        })
    }

    fn state<'a>(
        &'a self,
        key: &'a [u8],
    ) -> BoxFuture<'a, Result<(Option<RwState>, Ticks), DecideError>> {
        Box::pin(async move {
            let con = &mut self.con.clone();
            let state = self.lock.state_async(con, key).await?;
            // The scripts' clock: the server's.
            let (seconds, micros): (u64, u64) = redis::cmd("TIME")
                .query_async(con)
                .await
                .map_err(|e| DecideError::Unavailable(e.to_string()))?;
            Ok((
                state,
                seconds
                    .saturating_mul(sluicegate_core::SECOND)
                    .saturating_add(micros),
            ))
        })
    }
}

/// The key readiness writes: beside, never among, the policies' (`sluicegate:serve:…`).
const READY_KEY: &str = "sluicegate:ready";
/// It expires soon after the last probe.
const READY_KEY_TTL_MS: u64 = 60_000;

/// Redis keys of policy `name`: `sluicegate:serve:NAME:HASH:KEY`, where HASH is of the
/// parameters only: after a change of them each key's state is moved to its new name
/// as the new parameters hold its use (see `Carried`), the rest expiring; a change of
/// apps or description keeps them.
fn prefix(name: &str, policy: &Policy) -> String {
    let params = Policy {
        apps: Vec::new(),
        description: String::new(),
        owner: String::new(),
        fleet: None,
        // None of these changes what Redis holds.
        on_full: None::<OnFull>,
        shadow: false,
        max_lease: None,
        // Which requests count and on which key, not what a key holds.
        when: None,
        key: None,
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
