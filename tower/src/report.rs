//! Costs known only after the response (tokens, bytes, rows): the handler puts the actual
//! cost in a [`ReportedCost`] extension, and the response body reports how far it is
//! from the cost decided, once, when the body ends or is dropped unfinished.

use std::hash::BuildHasher;
use std::sync::Arc;
use std::time::Duration;

use http::Response;
use sluicegate_core::memory::KeyedLimiter;
use sluicegate_core::{Clock, Report, Reserve};

use crate::body::UntilDone;
use crate::key::Key;
use crate::limiter::{Backend, NoWait, Pending, Settled};

/// The actual cost of a request, known when its response is made: a handler puts it in
/// the response's extensions, and the rate limit charges the difference from the cost
/// it decided (a refund if less) when the body is done, or dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReportedCost(pub u64);

/// The limiters [`Reporting`] wraps: those whose algorithm takes reports.
pub trait Reportable: Backend {
    /// Applies a report (see [`Backend::report`]).
    fn report_cost(&self, key: &Key, adjustment: i64) -> Pending<Settled>;
}

/// A limiter that takes the costs handlers report after the response ([`ReportedCost`]),
/// deciding as the limiter it wraps. A wrapper rather than every limiter, because an
/// in-process or Redis limiter takes reports only if its algorithm does (not pacing).
///
/// The algorithm's overdraft bounds the debt a report may leave: with none, a report
/// never takes a key below zero.
#[derive(Debug)]
pub struct Reporting<L>(pub L);

impl<L: Reportable> Backend for Reporting<L> {
    fn check(&self, key: &Key, cost: u64) -> Pending {
        self.0.check(key, cost)
    }

    fn reserve(&self, key: &Key, cost: u64, max_wait: Duration) -> Pending {
        self.0.reserve(key, cost, max_wait)
    }

    fn report(&self, key: &Key, adjustment: i64) -> Pending<Settled> {
        self.0.report_cost(key, adjustment)
    }
}

/// A report in process: at once.
fn in_process<A: Report, C: Clock, H: BuildHasher>(
    limiter: &KeyedLimiter<Key, A, C, H>,
    key: &Key,
    adjustment: i64,
) -> Pending<Settled> {
    Pending::Ready(Settled::Reported(limiter.report(key, adjustment)))
}

impl<A: Reserve + Report, C: Clock, H: BuildHasher> Reportable for KeyedLimiter<Key, A, C, H>
where
    Self: Backend,
{
    fn report_cost(&self, key: &Key, adjustment: i64) -> Pending<Settled> {
        in_process(self, key, adjustment)
    }
}

impl<A: Report, C: Clock, H: BuildHasher> Reportable for NoWait<A, C, H>
where
    Self: Backend,
{
    fn report_cost(&self, key: &Key, adjustment: i64) -> Pending<Settled> {
        in_process(&self.0, key, adjustment)
    }
}

#[cfg(feature = "redis")]
impl<A> Reportable for crate::limiter::RedisBackend<A>
where
    A: sluicegate_redis::LuaAlgorithm + Reserve + Report + Send + Sync + 'static,
    A::State: Send + Sync,
{
    fn report_cost(&self, key: &Key, adjustment: i64) -> Pending<Settled> {
        let (limiter, mut con, key) = (self.limiter.clone(), self.con.clone(), key.to_bytes());
        Pending::Later(Box::pin(async move {
            let request = sluicegate_core::ReportRequest::new(&key).adjust(adjustment);
            match limiter.report_async(&mut con, &request).await {
                Ok(reported) => Settled::Reported(reported),
                Err(e) if e.is_unavailable() => Settled::Unavailable,
                Err(e) => Settled::Failed(e.to_string()),
            }
        }))
    }
}

/// What an admitted request may owe: its key's limiter and the cost decided.
pub(crate) struct Charge {
    limiter: Arc<dyn Backend>,
    key: Key,
    decided: u64,
}

impl Charge {
    pub(crate) fn new(limiter: Arc<dyn Backend>, key: Key, decided: u64) -> Self {
        Self {
            limiter,
            key,
            decided,
        }
    }

    /// The response, its body owing the difference between the cost its handler
    /// reported and the one decided (nothing without a report, or with no difference).
    pub(crate) fn settle<B>(self, response: Response<B>) -> Response<ReportBody<B>> {
        let adjustment =
            response
                .extensions()
                .get::<ReportedCost>()
                .map(|&ReportedCost(actual)| {
                    let delta = i128::from(actual) - i128::from(self.decided);
                    i64::try_from(delta).unwrap_or(if delta < 0 { i64::MIN } else { i64::MAX })
                });
        let owed = match adjustment {
            Some(adjustment) if adjustment != 0 => Some(Owed {
                charge: self,
                adjustment,
            }),
            _ => None,
        };
        response.map(|inner| UntilDone::new(inner, owed))
    }
}

/// A report owed, made when dropped: the body ended, failed, or was dropped unfinished.
pub struct Owed {
    charge: Charge,
    adjustment: i64,
}

impl std::fmt::Debug for Owed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Owed")
            .field("adjustment", &self.adjustment)
            .finish_non_exhaustive()
    }
}

impl Drop for Owed {
    fn drop(&mut self) {
        let Charge { limiter, key, .. } = &self.charge;
        if let Pending::Later(future) = limiter.report(key, self.adjustment) {
            // Never blocks here: a round trip goes on the runtime (outside one, there is
            // nothing to run it on and the report is lost).
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(future);
            }
        }
    }
}

/// The response body of [`RateLimit`](crate::RateLimit): the inner body, reporting the
/// handler's [`ReportedCost`] once, when it ends, fails, or is dropped unfinished (the
/// client went away).
pub type ReportBody<B> = UntilDone<B, Owed>;
