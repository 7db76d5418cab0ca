//! Decisions in this process: a bounded keyed limiter per policy, lease tables per
//! concurrency policy; the core's synchronous host contracts behind the service's.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use sluicegate_core::clock::Clock;
use sluicegate_core::memory::{KeyedLimiter, KeyedRwLeases, OnFull};
use sluicegate_core::rwlock::{RwLease, RwState};
use sluicegate_core::{
    AnyAlgorithm, AnyState, LeaseRequest, Limiter, Outcome, ReportRequest, Reported, Reporter,
    Request, Ticks,
};
use sluicegate_policy::Policy;

use super::backend::{
    Backend, DecideError, LeaseAnswer, LeaseOp, LeaseTable, RateLimit, Unsupported,
};
use super::MAX_KEY;
use crate::metrics::Table;

/// A policy's keyed limiter in this process.
pub(crate) type Keyed = KeyedLimiter<Vec<u8>, AnyAlgorithm>;

/// How many keys a policy's table holds in this process. A full table forgets keys that
/// would admit a request first, fresh soonest first, then does as the policy's
/// `on_full` says.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Keys {
    /// Keys per policy (`--max-keys`).
    pub(crate) max_keys: usize,
    /// Bytes per policy's limiter at the worst (`--max-policy-bytes`): a sliding log
    /// of a large limit gets fewer keys.
    pub(crate) max_policy_bytes: usize,
}

impl Keys {
    /// A limiter deciding `rule`, doing as `on_full` says when full: at most `max_keys`
    /// keys, fewer if keys as long as the service accepts would not fit in
    /// `max_policy_bytes`.
    pub(crate) fn limiter(self, rule: &AnyAlgorithm, on_full: OnFull) -> Keyed {
        let within = Keyed::max_keys_within(rule, self.max_policy_bytes, MAX_KEY);
        KeyedLimiter::new(rule.clone(), self.max_keys.min(within)).on_full(on_full)
    }

    /// A `1/parts` share of these bounds (at least a key and a byte).
    pub(crate) fn share(self, parts: usize) -> Self {
        let parts = parts.max(1);
        Self {
            max_keys: (self.max_keys / parts).max(1),
            max_policy_bytes: (self.max_policy_bytes / parts).max(1),
        }
    }
}

/// The in-process backend.
#[derive(Debug, Clone, Copy)]
pub(crate) struct InProcess(pub(crate) Keys);

impl Backend for InProcess {
    fn name(&self) -> &'static str {
        "memory"
    }

    fn rate(
        &self,
        _name: &str,
        policy: &Policy,
        rule: &AnyAlgorithm,
    ) -> Result<Arc<dyn RateLimit>, Unsupported> {
        let on_full = policy.on_full.unwrap_or_default();
        Ok(Arc::new(self.0.limiter(rule, on_full)))
    }

    fn leases(&self, _name: &str, _policy: &Policy, lock: RwLease) -> Arc<dyn LeaseTable> {
        Arc::new(KeyedRwLeases::new(lock, self.0.max_keys))
    }

    fn supports(&self, _rule: &AnyAlgorithm) -> Result<(), Unsupported> {
        Ok(())
    }

    fn counters(&self) -> Arc<dyn crate::limitador::Counters> {
        Arc::new(crate::limitador::InMemory::new(self.0.max_keys))
    }

    fn share(&self, parts: usize) -> Option<Box<dyn Backend>> {
        Some(Box::new(Self(self.0.share(parts))))
    }
}

/// A keyed limiter's table as the metrics show it.
pub(crate) fn table(limiter: &Keyed) -> Table {
    Table {
        keys: limiter.len(),
        capacity: limiter.capacity(),
        evicted: limiter.evicted(),
        refused: limiter.refused(),
    }
}

impl RateLimit for Keyed {
    fn check<'a>(
        &'a self,
        request: Request<'a>,
    ) -> BoxFuture<'a, Result<Outcome<()>, DecideError>> {
        // Lazy, as every backend's: a carried change decides only the steps it reaches.
        Box::pin(async move {
            let decided = Limiter::check(self, &request).map(Outcome::Decided);
            decided.map_err(Into::into)
        })
    }

    fn report<'a>(
        &'a self,
        request: ReportRequest<'a>,
    ) -> BoxFuture<'a, Result<Reported, DecideError>> {
        Box::pin(async move { Reporter::report(self, &request).map_err(Into::into) })
    }

    fn remove_state<'a>(
        &'a self,
        key: &'a [u8],
    ) -> BoxFuture<'a, Result<Option<(AnyState, Ticks)>, DecideError>> {
        Box::pin(async move {
            let now = self.clock().now();
            Ok(KeyedLimiter::remove_state(self, key).map(|state| (state, now)))
        })
    }

    /// A full table that refuses new keys keeps the use out: the key is decided fresh.
    fn seed_state<'a>(
        &'a self,
        key: &'a [u8],
        state: AnyState,
    ) -> BoxFuture<'a, Result<(), DecideError>> {
        Box::pin(async move {
            KeyedLimiter::seed_state(self, key, state);
            Ok(())
        })
    }

    fn algorithm(&self) -> &AnyAlgorithm {
        KeyedLimiter::algorithm(self)
    }

    fn table(&self) -> Option<Table> {
        Some(table(self))
    }
}

impl LeaseTable for KeyedRwLeases {
    fn lease<'a>(
        &'a self,
        op: LeaseOp,
        request: LeaseRequest<'a>,
    ) -> BoxFuture<'a, Result<LeaseAnswer, DecideError>> {
        Box::pin(async move {
            match op {
                LeaseOp::Acquire { mode, wait } => self
                    .acquire(&request, mode, wait)
                    .map(LeaseAnswer::acquired)
                    .map_err(Into::into),
                LeaseOp::Release => LeaseAnswer::held(self.release(&request)),
                LeaseOp::Renew => LeaseAnswer::held(self.renew(&request)),
                LeaseOp::Withdraw => LeaseAnswer::withdrawn(self.withdraw(&request)),
            }
        })
    }

    fn state<'a>(
        &'a self,
        key: &'a [u8],
    ) -> BoxFuture<'a, Result<(Option<RwState>, Ticks), DecideError>> {
        Box::pin(async move { Ok((KeyedRwLeases::state(self, key), self.clock().now())) })
    }

    // A lease table forgets fresh keys only.
    fn table(&self) -> Option<Table> {
        Some(Table {
            keys: self.len(),
            capacity: self.capacity(),
            evicted: 0,
            refused: self.refused(),
        })
    }
}
