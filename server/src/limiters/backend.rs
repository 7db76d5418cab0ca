//! The contract between the service and where its decisions are kept: a [`Backend`]
//! builds each policy's limiter ([`RateLimit`]) or lease table ([`LeaseTable`]), which
//! answer the core's requests ([`Request`], [`ReportRequest`], [`LeaseRequest`]). Each
//! backend owns what it needs (a Redis backend its connection), so a limiter can never
//! meet a backend it was not built by.

use std::fmt::Debug;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use sluicegate_core::rwlock::{LockError, LockMode, Place, RwAcquired, RwLease, RwState};
use sluicegate_core::{
    AnyAlgorithm, AnyState, Decision, Grant, LeaseError, LeaseRequest, Outcome, ReportRequest,
    Reported, Request, Ticks,
};
use sluicegate_policy::Policy;

use crate::metrics::Table;

/// Where decisions are kept: in this process (`InProcess`) or in Redis (`InRedis`).
pub(crate) trait Backend: Send + Sync + Debug {
    /// The name operators read in logs and traces (`memory`, `redis`).
    fn name(&self) -> &'static str;

    /// The limiter deciding `rule` for the policy `name` (whose parameters are `policy`).
    fn rate(
        &self,
        name: &str,
        policy: &Policy,
        rule: &AnyAlgorithm,
    ) -> Result<Arc<dyn RateLimit>, Unsupported>;

    /// The lease tables of the concurrency policy `name`: `lock` per key.
    fn leases(&self, name: &str, policy: &Policy, lock: RwLease) -> Arc<dyn LeaseTable>;

    /// Whether `rule` can be decided here at all.
    fn supports(&self, rule: &AnyAlgorithm) -> Result<(), Unsupported>;

    /// This backend building tables of a `1/parts` share of a policy's keys and bytes in
    /// this process, so that `parts` of them together hold what one policy may; `None`
    /// where it builds none of its own.
    fn share(&self, _parts: usize) -> Option<Box<dyn Backend>> {
        None
    }

    /// Where the counters of limitador's limits file are kept.
    fn counters(&self) -> Arc<dyn crate::limitador::Counters>;

    /// Whether it answers now (`/readyz`); in process, always.
    fn ready(&self) -> BoxFuture<'_, Result<(), DecideError>> {
        Box::pin(async { Ok(()) })
    }

    /// The Redis connection decisions go through, for what else replicas share there
    /// (the quota shares); `None` in this process.
    #[cfg(feature = "grpc")]
    fn redis(&self) -> Option<sluicegate_redis::ReconnectingAsync> {
        None
    }

    /// Its own lines for `/metrics` (none by default).
    fn metrics(&self) -> String {
        String::new()
    }
}

/// A rule this backend cannot decide, and the policy field at fault if there is one.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{why}")]
pub(crate) struct Unsupported {
    /// The field at fault (`limit`, `period`, ...).
    pub(crate) field: Option<&'static str>,
    pub(crate) why: String,
}

/// One policy's keyed limit on a backend.
pub(crate) trait RateLimit: Send + Sync + Debug {
    /// Decides `request` and stores the key's new state; while the store is
    /// unreachable, what the fail policy answers (an unreachable store under
    /// [`FailPolicy::Error`](sluicegate_core::FailPolicy::Error) is the error).
    fn check<'a>(&'a self, request: Request<'a>)
        -> BoxFuture<'a, Result<Outcome<()>, DecideError>>;

    /// Applies a report (see [`sluicegate_core::Reporter`]).
    fn report<'a>(
        &'a self,
        request: ReportRequest<'a>,
    ) -> BoxFuture<'a, Result<Reported, DecideError>>;

    /// Takes `key`'s state out, with the time it was read at (`None`: it held none):
    /// the first step of carrying its use across a change of parameters.
    fn remove_state<'a>(
        &'a self,
        key: &'a [u8],
    ) -> BoxFuture<'a, Result<Option<(AnyState, Ticks)>, DecideError>>;

    /// Gives `key` `state` now, unless it holds one.
    fn seed_state<'a>(
        &'a self,
        key: &'a [u8],
        state: AnyState,
    ) -> BoxFuture<'a, Result<(), DecideError>>;

    /// The algorithm it decides.
    fn algorithm(&self) -> &AnyAlgorithm;

    /// The fill of its key table in this process, if it has one.
    fn table(&self) -> Option<Table> {
        None
    }
}

/// One concurrency policy's lease tables on a backend.
pub(crate) trait LeaseTable: Send + Sync + Debug {
    /// Carries out `op` for `request`.
    fn lease<'a>(
        &'a self,
        op: LeaseOp,
        request: LeaseRequest<'a>,
    ) -> BoxFuture<'a, Result<LeaseAnswer, DecideError>>;

    /// `key`'s holders and queue (`None` when nobody holds or waits), and the time the
    /// table reads now, which their expiries are on.
    fn state<'a>(
        &'a self,
        key: &'a [u8],
    ) -> BoxFuture<'a, Result<(Option<RwState>, Ticks), DecideError>>;

    /// The fill of its key table in this process, if it has one.
    fn table(&self) -> Option<Table> {
        None
    }
}

/// A lease operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LeaseOp {
    /// Take a lease in `mode` (or re-enter the one held); refused, queue for `wait`
    /// ticks where the lock queues callers, none: never queue.
    Acquire { mode: LockMode, wait: Option<Ticks> },
    /// Give one hold back.
    Release,
    /// Extend an unexpired lease.
    Renew,
    /// Give up a place in the queue.
    Withdraw,
}

/// What a lease operation did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LeaseAnswer {
    /// Acquired: the lease.
    Granted(Grant),
    /// Denied: the lock is held, others wait ahead (or, in this process, every table
    /// is in use); the decision's `retry_after` says when it would be granted if nobody
    /// acted, the place where the caller waits.
    Busy(Decision, Option<Place>),
    /// Released or renewed: the lease as it stands.
    Held(Grant),
    /// The owner holds no unexpired lease.
    NotHeld,
    /// The owner's place was given up.
    Withdrawn,
    /// The owner had no place in the queue.
    NotQueued,
}

impl LeaseAnswer {
    /// The answer to an acquire.
    pub(crate) fn acquired(acquired: RwAcquired) -> Self {
        match acquired.grant {
            Some(grant) => Self::Granted(grant),
            None => Self::Busy(acquired.decision, acquired.place),
        }
    }

    /// The answer to a release or renew, whose `NotHeld` is an answer, not an error.
    pub(crate) fn held<E: Into<DecideError>>(
        result: Result<Grant, E>,
    ) -> Result<Self, DecideError> {
        match result.map_err(Into::into) {
            Ok(grant) => Ok(Self::Held(grant)),
            Err(DecideError::Lease(LeaseError::NotHeld)) => Ok(Self::NotHeld),
            Err(e) => Err(e),
        }
    }

    /// The answer to a withdrawal, whose `NotQueued` is an answer, not an error.
    pub(crate) fn withdrawn<E: Into<DecideError>>(
        result: Result<(), E>,
    ) -> Result<Self, DecideError> {
        match result.map_err(Into::into) {
            Ok(()) => Ok(Self::Withdrawn),
            Err(DecideError::Lock(LockError::NotQueued)) => Ok(Self::NotQueued),
            Err(e) => Err(e),
        }
    }
}

/// Why a decision could not be made.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum DecideError {
    /// The policy is a concurrency limit.
    #[error("policy {0:?} is a concurrency limit: use /v1/lease/acquire, release and renew")]
    Leases(String),
    /// The backend is unreachable and the fail policy is to say so.
    #[error("the decision backend is unavailable: {0}")]
    Unavailable(String),
    /// The backend refused (a key holding something else, a parameter beyond its range).
    #[error("{0}")]
    Backend(String),
    /// The policy is a rate limit, not leases.
    #[error("policy {0:?} is a rate limit: use /v1/decide")]
    Rate(String),
    /// A lease argument is out of range (the owner's length, the ttl).
    #[error("{0}")]
    Lease(LeaseError),
    /// A lock call cannot be carried out (an argument out of range, a full queue).
    #[error("{0}")]
    Lock(LockError),
    /// The policy's algorithm takes no reports (a pacing queue, a ban).
    #[error("policy {0:?} cannot take reports: a pacing queue's slots are already handed out, and a ban counts no requests")]
    NoReports(String),
}

impl From<LeaseError> for DecideError {
    fn from(e: LeaseError) -> Self {
        Self::Lease(e)
    }
}

impl From<LockError> for DecideError {
    fn from(e: LockError) -> Self {
        match e {
            LockError::NotHeld => Self::Lease(LeaseError::NotHeld),
            e => Self::Lock(e),
        }
    }
}

impl From<sluicegate_core::ParamError> for DecideError {
    fn from(e: sluicegate_core::ParamError) -> Self {
        Self::Backend(e.to_string())
    }
}

impl From<sluicegate_redis::Error> for DecideError {
    fn from(e: sluicegate_redis::Error) -> Self {
        match e {
            sluicegate_redis::Error::Lease(e) => Self::Lease(e),
            sluicegate_redis::Error::Lock(e) => e.into(),
            e if e.is_unavailable() => Self::Unavailable(e.to_string()),
            e => Self::Backend(e.to_string()),
        }
    }
}
