//! A change of a policy's parameters, over any backend: each key's use is carried into
//! the new limiter ([`AnyAlgorithm::carry_from`]), so a raise applies at once and a cut
//! refuses until the use the key holds has passed. While the limiter before the change
//! may still hold a key's use, a key's first decision or report on this server takes
//! its state out of it and seeds the new one where that key holds none.

use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use sluicegate_core::{
    Algorithm, AnyAlgorithm, AnyState, Outcome, ReportRequest, Reported, Request, Ticks,
};

use super::backend::{DecideError, RateLimit};
use crate::metrics::Table;

/// Stripes of keys whose carrying on this server is one step with their decision.
const STRIPES: usize = 64;

/// The new limiter, with the old one while it may still hold a key's use.
#[derive(Debug)]
pub(crate) struct Carried {
    new: Arc<dyn RateLimit>,
    old: Mutex<Option<Arc<dyn RateLimit>>>,
    /// When no key's use in the old limiter is left.
    until: Instant,
    /// Set once the old limiter is dropped: every later decision reads this flag
    /// alone, neither the clock nor the lock.
    dropped: AtomicBool,
    /// One carrying at a time per stripe of keys, so that a racing request of this
    /// server cannot decide on the new limiter before the key's use is there.
    stripes: [tokio::sync::Mutex<()>; STRIPES],
    hasher: RandomState,
}

/// How long `algorithm` may hold a key's use: from a decision filling a fresh key
/// until it is fresh again (a window's period, a bucket's refill, a ban's end).
fn horizon(algorithm: &AnyAlgorithm) -> Ticks {
    let limit = algorithm.peek(None, 0, 0).limit;
    algorithm.decide(None, 0, limit).0.reset_after
}

impl Carried {
    /// `new`, carrying each key's use out of `old` while `old` may hold it.
    pub(crate) fn new(new: Arc<dyn RateLimit>, old: Arc<dyn RateLimit>) -> Self {
        let until = Instant::now() + Duration::from_micros(horizon(old.algorithm()));
        Self {
            new,
            old: Mutex::new(Some(old)),
            until,
            dropped: AtomicBool::new(false),
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

    /// The old limiter while it may hold a key's use; dropped once none is left.
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

    /// Runs `then` on the new limiter once `key`'s use, if the old limiter holds any,
    /// is carried into it. A failure to carry is logged and the request decided as
    /// it is: the new limiter's own failure answers it.
    async fn carrying<T>(
        &self,
        key: &[u8],
        then: BoxFuture<'_, Result<T, DecideError>>,
    ) -> Result<T, DecideError> {
        let Some(old) = self.old() else {
            return then.await;
        };
        let _serial = self.stripe(key).lock().await;
        if let Err(e) = carry(&*old, &*self.new, key).await {
            tracing::warn!(error = %e, "a key's use not carried across a change of parameters");
        }
        then.await
    }
}

/// Moves `key`'s state from `old` into `new`, as `new`'s parameters hold its use.
async fn carry(old: &dyn RateLimit, new: &dyn RateLimit, key: &[u8]) -> Result<(), DecideError> {
    let Some((state, now)) = old.remove_state(key).await? else {
        return Ok(());
    };
    match new.algorithm().carry_from(old.algorithm(), &state, now) {
        Some(carried) => new.seed_state(key, carried).await,
        None => Ok(()),
    }
}

impl RateLimit for Carried {
    fn check<'a>(
        &'a self,
        request: Request<'a>,
    ) -> BoxFuture<'a, Result<Outcome<()>, DecideError>> {
        Box::pin(self.carrying(request.key, self.new.check(request)))
    }

    fn report<'a>(
        &'a self,
        request: ReportRequest<'a>,
    ) -> BoxFuture<'a, Result<Reported, DecideError>> {
        Box::pin(self.carrying(request.key, self.new.report(request)))
    }

    fn remove_state<'a>(
        &'a self,
        key: &'a [u8],
    ) -> BoxFuture<'a, Result<Option<(AnyState, Ticks)>, DecideError>> {
        self.new.remove_state(key)
    }

    fn seed_state<'a>(
        &'a self,
        key: &'a [u8],
        state: AnyState,
    ) -> BoxFuture<'a, Result<(), DecideError>> {
        self.new.seed_state(key, state)
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

    use sluicegate_core::{AnyAlgorithm, FixedWindow, Request, TokenBucket};

    use super::super::backend::RateLimit;
    use super::super::memory::{Keyed, Keys};
    use super::Carried;

    const HOUR: u64 = 3_600_000_000;

    fn limiter(rule: AnyAlgorithm) -> Arc<Keyed> {
        let keys = Keys {
            max_keys: 1000,
            max_policy_bytes: 1 << 20,
        };
        Arc::new(keys.limiter(&rule, Default::default()))
    }

    fn window(limit: u64) -> Arc<Keyed> {
        limiter(AnyAlgorithm::from(FixedWindow::new(limit, HOUR).unwrap()))
    }

    fn change(old: &Arc<Keyed>, new: &Arc<Keyed>) -> Carried {
        let (old, new): (Arc<dyn RateLimit>, Arc<dyn RateLimit>) = (old.clone(), new.clone());
        Carried::new(new, old)
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
    async fn a_raise_applies_at_once_and_a_cut_holds_the_use() {
        // 1 used of 3, raised to 5: 4 more now.
        let (old, new) = (window(3), window(5));
        assert_eq!(admitted(&*old, 1).await, 1);
        assert_eq!(admitted(&change(&old, &new), 6).await, 4);
        // 3 used of 5, cut to 2: nothing more in this window.
        let (old, new) = (window(5), window(2));
        assert_eq!(admitted(&*old, 3).await, 3);
        assert_eq!(admitted(&change(&old, &new), 3).await, 0);
        // A key the old limiter never saw gets the new limit whole.
        let fresh = change(&window(3), &window(5));
        assert_eq!(admitted(&fresh, 6).await, 5);
    }

    #[tokio::test]
    async fn a_buckets_use_is_carried_and_the_old_limiter_keeps_nothing() {
        let bucket = |capacity| {
            limiter(AnyAlgorithm::from(
                TokenBucket::new(capacity, 1, HOUR).unwrap(),
            ))
        };
        let (old, new) = (bucket(3), bucket(5));
        assert_eq!(admitted(&*old, 1).await, 1);
        let carried = change(&old, &new);
        assert_eq!(admitted(&carried, 6).await, 4);
        assert_eq!(old.peek(&b"k"[..], 0).remaining, 3, "moved out of the old");
    }

    /// While the old limiter may hold a key's use, a decision waits for its key's
    /// stripe, so that a racing request cannot decide before the use is carried.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_decision_during_a_change_holds_its_keys_stripe() {
        let carried = Arc::new(change(&window(3), &window(5)));
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
