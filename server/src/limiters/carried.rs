//! A change of a policy's parameters, over any backend: the limiter before the change
//! (same algorithm) is kept for one of its periods, so a key's use under the old
//! parameters still counts: nothing is admitted above the old limit within its window,
//! nor above the new one (the old limiter must keep `lower_by` more room when the limit
//! drops).

use std::future::Future;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use sluicegate_core::{AnyAlgorithm, Decision, Outcome, ReportRequest, Reported, Request, Ticks};

use super::backend::{DecideError, RateLimit};
use crate::metrics::Table;

/// Stripes of keys decided one at a time during a change.
const STRIPES: usize = 64;

/// The new limiter, with the old one while it still counts.
#[derive(Debug)]
pub(crate) struct Carried {
    new: Arc<dyn RateLimit>,
    old: Mutex<Option<Arc<dyn RateLimit>>>,
    /// When the old limiter's last window has passed.
    until: Instant,
    /// Set once the old limiter is dropped: every later decision reads this flag
    /// alone, neither the clock nor the lock.
    dropped: AtomicBool,
    /// How much lower the new limit is than the old.
    lower_by: u64,
    /// One decision at a time per stripe of keys while the old limiter counts, so that
    /// its peek and its count are one step for racing requests of this server.
    stripes: [tokio::sync::Mutex<()>; STRIPES],
    hasher: RandomState,
}

impl Carried {
    /// `new`, with `old` (of limit `old_limit`) counting for `period` ticks more.
    pub(crate) fn new(
        new: Arc<dyn RateLimit>,
        old: Arc<dyn RateLimit>,
        old_limit: u64,
        new_limit: u64,
        period: Ticks,
    ) -> Self {
        Self {
            new,
            old: Mutex::new(Some(old)),
            until: Instant::now() + Duration::from_micros(period),
            dropped: AtomicBool::new(false),
            lower_by: old_limit.saturating_sub(new_limit),
            stripes: std::array::from_fn(|_| tokio::sync::Mutex::new(())),
            hasher: RandomState::new(),
        }
    }

    /// The stripe of `key`.
    fn stripe(&self, key: &[u8]) -> &tokio::sync::Mutex<()> {
        // Below STRIPES: the remainder of a division by it.
        let index = usize::try_from(self.hasher.hash_one(key) % STRIPES as u64).unwrap_or(0);
        &self.stripes[index]
    }

    /// The old limiter while it still counts; dropped once its window has passed.
    fn old(&self) -> Option<Arc<dyn RateLimit>> {
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

/// Decides on the new limiter while the one before a change still counts: `room` is the
/// old limiter's peek at the cost plus how much lower the new limit is, `new` the new
/// limiter's decision (taken only if the old has room), `count_old` counts the cost in
/// the old one (only if the new admits). The futures are lazy: each runs only if it is
/// reached.
async fn check_carried<E>(
    room: impl Future<Output = Result<Decision, E>>,
    new: impl Future<Output = Result<Outcome<()>, E>>,
    count_old: impl Future<Output = Result<Outcome<()>, E>>,
    new_limit: u64,
) -> Result<Outcome<()>, E> {
    let room = room.await?;
    if !room.allowed {
        return Ok(Outcome::Decided(Decision::deny(
            new_limit,
            0,
            room.retry_after,
            room.reset_after,
        )));
    }
    let mut outcome = new.await?;
    if let Outcome::Decided(decision) | Outcome::Local(decision, ()) = &mut outcome {
        if decision.allowed {
            // Admitted by the new limiter, whatever the count in the old one answers (in
            // Redis a racing server may have filled it since the peek), or fails.
            let _ = count_old.await;
            decision.remaining = decision.remaining.min(room.remaining);
        }
    }
    Ok(outcome)
}

/// The limit `algorithm`'s decisions report: a fresh key's decision costs nothing and
/// names it.
pub(crate) fn limit_of(algorithm: &AnyAlgorithm) -> u64 {
    use sluicegate_core::Algorithm;
    algorithm.peek(None, 0, 0).limit
}

impl RateLimit for Carried {
    fn check<'a>(
        &'a self,
        request: Request<'a>,
    ) -> BoxFuture<'a, Result<Outcome<()>, DecideError>> {
        Box::pin(async move {
            let Some(old) = self.old() else {
                return self.new.check(request).await;
            };
            let _serial = self.stripe(request.key).lock().await;
            let room = request.cost(request.cost.saturating_add(self.lower_by));
            check_carried(
                old.peek(room),
                self.new.check(request),
                old.check(request),
                limit_of(self.new.algorithm()),
            )
            .await
        })
    }

    fn peek<'a>(&'a self, request: Request<'a>) -> BoxFuture<'a, Result<Decision, DecideError>> {
        self.new.peek(request)
    }

    /// Counted in the old limiter too; the new one's report is the answer.
    fn report<'a>(
        &'a self,
        request: ReportRequest<'a>,
    ) -> BoxFuture<'a, Result<Reported, DecideError>> {
        Box::pin(async move {
            if let Some(old) = self.old() {
                let _ = old.report(request).await;
            }
            self.new.report(request).await
        })
    }

    fn algorithm(&self) -> &AnyAlgorithm {
        self.new.algorithm()
    }

    fn table(&self) -> Option<Table> {
        self.new.table()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use sluicegate_core::{AnyAlgorithm, FixedWindow, Request};

    use super::super::backend::RateLimit;
    use super::super::memory::{Keyed, Keys};
    use super::Carried;

    const HOUR: u64 = 3_600_000_000;

    fn window(limit: u64) -> Arc<Keyed> {
        let rule = AnyAlgorithm::from(FixedWindow::new(limit, HOUR).unwrap());
        let keys = Keys {
            max_keys: 1000,
            max_policy_bytes: 1 << 20,
        };
        Arc::new(keys.limiter(&rule, Default::default()))
    }

    fn change(old: &Arc<Keyed>, new: &Arc<Keyed>, old_limit: u64, new_limit: u64) -> Carried {
        let (old, new): (Arc<dyn RateLimit>, Arc<dyn RateLimit>) = (old.clone(), new.clone());
        Carried::new(new, old, old_limit, new_limit, HOUR)
    }

    async fn admitted(limiter: &dyn RateLimit, n: usize) -> usize {
        let mut count = 0;
        for _ in 0..n {
            let outcome = limiter.check(Request::new("k")).await.unwrap();
            count += usize::from(outcome.allowed());
        }
        count
    }

    #[tokio::test]
    async fn a_request_the_old_limit_refuses_is_counted_nowhere() {
        let (old, new) = (window(3), window(5));
        assert_eq!(admitted(&*old, 3).await, 3);
        let carried = change(&old, &new, 3, 5);
        assert_eq!(admitted(&carried, 4).await, 0);
        assert_eq!(new.peek(&b"k"[..], 0).remaining, 5);
    }

    /// While the old limiter counts, a decision waits for its key's stripe, so that
    /// two requests racing on two threads cannot both pass the old limiter's peek
    /// before either counts.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_decision_during_a_change_holds_its_keys_stripe() {
        let carried = Arc::new(change(&window(3), &window(5), 3, 5));
        let held = carried.stripe(b"k").lock().await;
        let waiting = {
            let carried = Arc::clone(&carried);
            tokio::spawn(async move { admitted(&*carried, 1).await })
        };
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "decided while its stripe was held");
        drop(held);
        assert_eq!(waiting.await.unwrap(), 1);
    }
}
