use std::time::Duration;

use super::cell::{InMemory, StateCell};
use super::wait;
use crate::{Clock, Decision, MonotonicClock, Report, Reported, Reserve, Ticks};

/// One limit shared by every caller: a whole service, one downstream API.
///
/// Decides with one compare-and-swap: of a 64-bit word for the buckets, decided in
/// its own units (see `BucketCell`), of a 128-bit one for the
/// windows, and under a mutex for the sliding log, bans and composites.
#[derive(Debug)]
pub struct DirectLimiter<A: InMemory, C = MonotonicClock> {
    algorithm: A,
    cell: A::Cell,
    clock: C,
}

impl<A: InMemory> DirectLimiter<A> {
    /// A limiter on the process's [`MonotonicClock`].
    pub fn new(algorithm: A) -> Self {
        Self::with_clock(algorithm, MonotonicClock::new())
    }
}

impl<A: InMemory, C: Clock> DirectLimiter<A, C> {
    /// A limiter reading `clock` (a [`ManualClock`](crate::ManualClock) in tests).
    pub fn with_clock(algorithm: A, clock: C) -> Self {
        Self {
            cell: algorithm.cell(),
            algorithm,
            clock,
        }
    }

    /// Decides a request of `cost` now: the "reject" strategy.
    #[inline]
    pub fn check(&self, cost: u64) -> Decision {
        self.algorithm.decide_in(&self.cell, &self.clock, cost)
    }

    /// Runs `admitted` if a request of `cost` is admitted now, else `denied` with the
    /// decision: the "degrade" strategy (serve from a cache, a cheaper path, a default).
    pub fn check_or_else<T>(
        &self,
        cost: u64,
        admitted: impl FnOnce() -> T,
        denied: impl FnOnce(Decision) -> T,
    ) -> T {
        wait::degrade(self.check(cost), admitted, denied)
    }

    /// What a request of `cost` would get now, changing nothing.
    pub fn peek(&self, cost: u64) -> Decision {
        self.algorithm
            .peek(self.cell.load(), self.clock.now(), cost)
    }

    /// Forgets all history: the next request finds the limit fresh.
    pub fn reset(&self) {
        self.cell.clear();
    }

    /// How many times a decision was computed again because another thread changed the
    /// state between its read and its compare-and-swap (zero for the limits that lock):
    /// a lower bound, counted without a locked instruction (which would cost about what a
    /// retry does), so two threads retrying at the same instant may count once.
    pub fn retries(&self) -> u64 {
        self.cell.retries()
    }

    /// The state now, for inspection or for moving it to another host.
    pub fn state(&self) -> Option<A::State> {
        self.cell.load()
    }

    /// The algorithm deciding.
    pub const fn algorithm(&self) -> &A {
        &self.algorithm
    }

    /// The clock read for every decision.
    pub const fn clock(&self) -> &C {
        &self.clock
    }
}

impl<A: InMemory + Report, C: Clock> DirectLimiter<A, C> {
    /// Reports a cost known after the work, now: `adjustment` units added to what the
    /// limit has taken (negative: given back), within the algorithm's overdraft.
    pub fn report(&self, adjustment: i64) -> Reported {
        let now = self.clock.now();
        let mut recorded = 0;
        let decision = self.cell.update(|state| {
            let (reported, state) = self.algorithm.report(state, now, adjustment);
            recorded = reported.recorded;
            (reported.decision, state)
        });
        Reported::new(adjustment, recorded, decision)
    }
}

impl<A: InMemory + Reserve, C: Clock> DirectLimiter<A, C> {
    /// Books a slot for `cost` if it can act within `max_wait` ticks; the decision's
    /// `delay` says how long the caller must wait before acting.
    pub fn reserve(&self, cost: u64, max_wait: Ticks) -> Decision {
        self.algorithm
            .reserve_in(&self.cell, &self.clock, cost, max_wait)
    }

    /// Waits in line: books a slot within `timeout` and sleeps once until it, or returns
    /// the denial at once if no slot is that close. Blocks the thread.
    pub fn acquire(&self, cost: u64, timeout: Duration) -> Result<Decision, Decision> {
        wait::blocking(self.reserve(cost, wait::ticks(timeout)))
    }

    /// [`acquire`](Self::acquire) as a future, sleeping on the tokio timer. Dropping the
    /// future after it has booked its slot gives the slot up unused.
    #[cfg(feature = "tokio")]
    pub async fn acquire_async(&self, cost: u64, timeout: Duration) -> Result<Decision, Decision> {
        wait::sleep(self.reserve(cost, wait::ticks(timeout))).await
    }
}
