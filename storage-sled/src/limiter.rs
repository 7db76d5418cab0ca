//! The limiters: one algorithm's states over a sled tree, a record per key, and the
//! sweeper that removes the fresh ones.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use sled::Tree;
use sluicegate_core::{
    check_now, Algorithm, Clock, Decision, Limiter, MonotonicClock, Report, ReportRequest,
    Reported, Reporter, Request, Reserve, Ticks,
};

use crate::error::Error;
use crate::record::{Durability, Records};

/// One algorithm's limits over a sled tree, a record per key.
#[derive(Debug, Clone)]
pub struct SledLimiter<A, C = MonotonicClock> {
    records: Records<C>,
    algorithm: A,
}

impl<A: Algorithm> SledLimiter<A> {
    /// A limiter over `tree`, with no key prefix, on the process's
    /// [`MonotonicClock`](https://docs.rs/sluicegate-core/0.1/sluicegate_core/struct.MonotonicClock.html).
    pub fn new(tree: Tree, algorithm: A, durability: Durability) -> Self {
        Self {
            records: Records::new(tree, durability),
            algorithm,
        }
    }
}

impl<A: Algorithm, C: Clock> SledLimiter<A, C> {
    /// Stores every key under `prefix`, so several limiters can share one tree.
    /// [`collect_expired`](Self::collect_expired) only touches keys under it.
    pub fn with_prefix(self, prefix: impl Into<Vec<u8>>) -> Self {
        Self {
            records: self.records.with_prefix(prefix.into()),
            ..self
        }
    }

    /// Reads time from `clock` instead.
    pub fn with_clock<D: Clock>(self, clock: D) -> SledLimiter<A, D> {
        SledLimiter {
            records: self.records.with_clock(clock),
            algorithm: self.algorithm,
        }
    }

    /// The time to decide a request at: its own `now`, or the clock's; beyond
    /// [`MAX_TICKS`](https://docs.rs/sluicegate-core/0.1/sluicegate_core/constant.MAX_TICKS.html)
    /// it is [`Error::Time`].
    fn time(&self, now: Option<Ticks>) -> Result<Ticks, Error> {
        let now = now.unwrap_or_else(|| self.records.clock.now());
        check_now(now).map_err(Error::Time)
    }

    /// Decides a request of `cost` for `key` now.
    pub fn check(&self, key: &[u8], cost: u64) -> Result<Decision, Error> {
        self.check_request(&Request::new(key).cost(cost))
    }

    /// Decides `request`, at its own time if it has one (replays, tests, a shared clock).
    pub fn check_request(&self, request: &Request<'_>) -> Result<Decision, Error> {
        let now = self.time(request.now)?;
        self.update(request.key, |state| {
            self.algorithm.decide(state, now, request.cost)
        })
    }

    /// What `request` would get, changing nothing.
    pub fn peek(&self, request: &Request<'_>) -> Result<Decision, Error> {
        let now = self.time(request.now)?;
        Ok(self
            .algorithm
            .peek(self.state(request.key)?, now, request.cost))
    }

    /// The stored state of `key`, decoded.
    pub fn state(&self, key: &[u8]) -> Result<Option<A::State>, Error> {
        self.records.read(key, |bytes| self.algorithm.decode(bytes))
    }

    /// Forgets `key`: its next request finds it fresh. Only a record holding a state of
    /// this algorithm is deleted: anything else is [`Error::Corrupt`] and left as it is.
    pub fn reset(&self, key: &[u8]) -> Result<(), Error> {
        self.update(key, |_| ((), None))
    }

    /// Removes the records under this limiter's prefix whose state is fresh at `now`,
    /// returning how many. A record that does not decode is left for an operator (and
    /// reported by [`state`](Self::state)); it does not stop the sweep. A `now` beyond
    /// [`MAX_TICKS`](https://docs.rs/sluicegate-core/0.1/sluicegate_core/constant.MAX_TICKS.html) is [`Error::Time`].
    pub fn collect_expired(&self, now: Ticks) -> Result<usize, Error> {
        let now = check_now(now).map_err(Error::Time)?;
        self.sweep(|state| self.algorithm.decide(Some(state), now, 0).1.is_none())
    }

    /// Deletes every state of this algorithm under the limiter's prefix, fresh or not,
    /// returning how many: the clean-up after a replay or a test. Records holding
    /// anything else (another algorithm's state, an application's value) stay.
    pub fn purge(&self) -> Result<usize, Error> {
        self.sweep(|_| true)
    }

    /// Deletes the records under the prefix that decode as this algorithm's state and
    /// that `doomed` picks, each by compare-and-swap, so a record changed meanwhile stays.
    fn sweep(&self, doomed: impl Fn(A::State) -> bool) -> Result<usize, Error> {
        let mut removed = 0;
        let tree = self.records.tree();
        for record in tree.scan_prefix(self.records.prefix()) {
            let (record_key, bytes) = record?;
            let Ok(state) = self.algorithm.decode(&bytes) else {
                continue;
            };
            if doomed(state)
                && tree
                    .compare_and_swap(&record_key, Some(&bytes), None::<&[u8]>)?
                    .is_ok()
            {
                removed += 1;
            }
        }
        if removed > 0 {
            self.records.flush()?;
        }
        Ok(removed)
    }

    /// The algorithm deciding.
    pub const fn algorithm(&self) -> &A {
        &self.algorithm
    }

    /// The tree the records live in.
    pub const fn tree(&self) -> &Tree {
        self.records.tree()
    }

    /// Applies `transition` to `key`'s record atomically (see [`Records::update`]).
    fn update<T>(
        &self,
        key: &[u8],
        transition: impl Fn(Option<A::State>) -> (T, Option<A::State>),
    ) -> Result<T, Error> {
        let algorithm = &self.algorithm;
        self.records.update(
            key,
            |bytes| algorithm.decode(bytes),
            |state| algorithm.encode_to_vec(state),
            |state| Ok(transition(state)),
        )
    }
}

impl<A: Reserve, C: Clock> SledLimiter<A, C> {
    /// Books a slot for `request` if it can act within `max_wait` ticks.
    pub fn reserve(&self, request: &Request<'_>, max_wait: Ticks) -> Result<Decision, Error> {
        let now = self.time(request.now)?;
        self.update(request.key, |state| {
            self.algorithm.reserve(state, now, request.cost, max_wait)
        })
    }
}

impl<A: Report, C: Clock> SledLimiter<A, C> {
    /// Reports a cost known after the work: `request`'s adjustment added to what its key
    /// has taken (negative: given back), within the algorithm's overdraft, at its own
    /// time or the clock's; one atomic read-modify-write of the record, as a decision.
    pub fn report(&self, request: &ReportRequest<'_>) -> Result<Reported, Error> {
        let now = self.time(request.now)?;
        self.update(request.key, |state| {
            self.algorithm.report(state, now, request.adjustment)
        })
    }
}

/// The inherent [`report`](SledLimiter::report).
impl<A: Report, C: Clock> Reporter for SledLimiter<A, C> {
    type Error = Error;

    fn report(&self, request: &ReportRequest<'_>) -> Result<Reported, Error> {
        SledLimiter::report(self, request)
    }
}

/// The host contract: a request with its own `now` is decided at that time, one without
/// at the limiter's clock; each operation is the inherent one of the same name.
impl<A: Reserve, C: Clock> Limiter for SledLimiter<A, C> {
    type Error = Error;

    fn check(&self, request: &Request<'_>) -> Result<Decision, Error> {
        self.check_request(request)
    }

    fn peek(&self, request: &Request<'_>) -> Result<Decision, Error> {
        SledLimiter::peek(self, request)
    }

    fn reset(&self, key: &[u8]) -> Result<(), Error> {
        SledLimiter::reset(self, key)
    }

    fn reserve(&self, request: &Request<'_>, max_wait: Ticks) -> Result<Decision, Error> {
        SledLimiter::reserve(self, request, max_wait)
    }
}

impl<A, C> SledLimiter<A, C>
where
    A: Algorithm + Clone + Send + 'static,
    C: Clock + Clone + Send + 'static,
{
    /// Runs [`collect_expired`](Self::collect_expired) every `interval` on a background
    /// thread until the returned [`Sweeper`] is dropped.
    pub fn spawn_sweeper(&self, interval: Duration) -> Sweeper {
        let limiter = self.clone();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            while !stopped.load(Ordering::Acquire) {
                // A failed sweep is retried at the next interval; decisions report errors.
                let _ = limiter.collect_expired(limiter.records.clock.now());
                std::thread::park_timeout(interval);
            }
        });
        Sweeper {
            stop,
            thread: Some(thread),
        }
    }
}

/// A background sweeper; dropping it stops the thread and waits for it.
#[derive(Debug)]
pub struct Sweeper {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Sweeper {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            let _ = thread.join();
        }
    }
}
