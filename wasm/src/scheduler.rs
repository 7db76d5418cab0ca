//! The throttle's queue, as a pure state machine over an explicit clock: calls wait in
//! order, each runs at the first instant the limit admits it, and the server's pushback
//! (a pause, a smaller budget, read from its headers by `limiter.js`) holds the queue. The bindings own the timers and the JS
//! calls; this decides what runs when.

use alloc::collections::VecDeque;

use sluicegate_core::Ticks;

use crate::error::Error;
use crate::limit::Limit;

/// What the server granted in its `RateLimit` header: at most `remaining` units until
/// `until`, whatever the local limit would admit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Budget {
    /// Units the server still admits.
    pub remaining: u64,
    /// When the server's window ends and this budget no longer applies.
    pub until: Ticks,
}

/// What the queue wants next.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Next<J> {
    /// Run this call now.
    Run(J),
    /// Nothing can run before this instant; ask again then.
    WaitUntil(Ticks),
    /// This call, the first, can never run now (a calendar window past its last
    /// boundary): it leaves the queue, refused for this reason.
    Refuse(J, Error),
    /// The queue is empty.
    Idle,
}

#[derive(Debug)]
struct Queued<J> {
    job: J,
    cost: u64,
    /// Set once admitted with a delay (pacing): the call runs at this instant.
    ready_at: Option<Ticks>,
}

/// Calls waiting in order for a [`Limit`].
#[derive(Debug)]
pub(crate) struct Scheduler<J> {
    limit: Limit,
    queue: VecDeque<Queued<J>>,
    max_queued: usize,
    paused_until: Ticks,
    budget: Option<Budget>,
    /// The largest cost known to fit a periodic limit: a cost fits if a larger one
    /// does, at any time, so each push need not decide it again.
    fitting: u64,
}

impl<J> Scheduler<J> {
    /// An empty queue that holds at most `max_queued` calls.
    pub(crate) fn new(limit: Limit, max_queued: usize) -> Self {
        Self {
            limit,
            queue: VecDeque::new(),
            max_queued,
            paused_until: 0,
            budget: None,
            fitting: 0,
        }
    }

    /// The limit the queue runs under.
    pub(crate) fn limit(&mut self) -> &mut Limit {
        &mut self.limit
    }

    /// How many calls are waiting.
    pub(crate) fn len(&self) -> usize {
        self.queue.len()
    }

    /// Queues a call of `cost` at `now`. Refused, handing the job back with the reason,
    /// when the queue is full or the cost can never fit the limit.
    pub(crate) fn push(&mut self, job: J, cost: u64, now: Ticks) -> Result<(), (J, Error)> {
        if self.queue.len() >= self.max_queued {
            return Err((job, Error::QueueFull(self.max_queued)));
        }
        if cost > self.fitting {
            if !self.limit.fits(cost, now) {
                return Err((job, Error::NeverFits(cost)));
            }
            if self.limit.periodic() {
                self.fitting = cost;
            }
        }
        self.queue.push_back(Queued {
            job,
            cost,
            ready_at: None,
        });
        Ok(())
    }

    /// Takes the first queued call `matches` accepts out of the queue (an aborted one).
    pub(crate) fn remove(&mut self, matches: impl Fn(&J) -> bool) -> Option<J> {
        let index = self.queue.iter().position(|queued| matches(&queued.job))?;
        self.queue.remove(index).map(|queued| queued.job)
    }

    /// Holds every call until `until` (a server's `Retry-After`); a shorter pause than
    /// one already in force changes nothing.
    pub(crate) fn pause_until(&mut self, until: Ticks) {
        self.paused_until = self.paused_until.max(until);
    }

    /// Replaces the server's budget.
    pub(crate) fn set_budget(&mut self, budget: Budget) {
        self.budget = Some(budget);
    }

    /// What to do at `now`: run the first call if the pause, the server's budget and the
    /// limit all allow it, or wait until the first instant they could.
    pub(crate) fn next(&mut self, now: Ticks) -> Next<J> {
        let Some(front) = self.queue.front_mut() else {
            return Next::Idle;
        };
        if now < self.paused_until {
            return Next::WaitUntil(self.paused_until);
        }
        if let Some(ready_at) = front.ready_at {
            return if now >= ready_at {
                self.pop()
            } else {
                Next::WaitUntil(ready_at)
            };
        }
        match self.budget {
            Some(budget) if now >= budget.until => self.budget = None,
            Some(budget) if front.cost > budget.remaining => {
                return Next::WaitUntil(budget.until);
            }
            _ => {}
        }
        let decision = self.limit.check(now, front.cost);
        if !decision.allowed {
            // A denial names a wait, at least one tick so a caller never spins, unless the
            // limit's periods ended since `push`.
            let Some(wait) = decision.retry_after else {
                let cost = front.cost;
                return self.queue.pop_front().map_or(Next::Idle, |queued| {
                    Next::Refuse(queued.job, Error::NeverFits(cost))
                });
            };
            return Next::WaitUntil(now.saturating_add(wait.max(1)));
        }
        if let Some(budget) = &mut self.budget {
            budget.remaining -= front.cost;
        }
        if decision.delay > 0 {
            let ready_at = now.saturating_add(decision.delay);
            front.ready_at = Some(ready_at);
            return Next::WaitUntil(ready_at);
        }
        self.pop()
    }

    fn pop(&mut self) -> Next<J> {
        self.queue
            .pop_front()
            .map_or(Next::Idle, |queued| Next::Run(queued.job))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use sluicegate_core::{Algorithm, Kind, MILLISECOND, SECOND};

    use super::*;
    use crate::options::algorithm;
    use crate::options::tests::{bucket, window};
    use sluicegate_core::AnyAlgorithm;

    /// Drives a scheduler the way the bindings do: calls arrive at their times, the clock
    /// jumps to each instant the scheduler asks for. Returns (job, run time) in run order.
    fn drive(limit: &AnyAlgorithm, arrivals: &[(Ticks, u64)]) -> Vec<(usize, Ticks)> {
        let mut scheduler = Scheduler::new(Limit::new(limit.clone()).unwrap(), arrivals.len());
        let (mut now, mut arrived, mut runs) = (0, 0, Vec::new());
        loop {
            while arrived < arrivals.len() && arrivals[arrived].0 <= now {
                scheduler.push(arrived, arrivals[arrived].1, now).unwrap();
                arrived += 1;
            }
            let next_arrival = arrivals.get(arrived).map(|a| a.0);
            match scheduler.next(now) {
                Next::Run(job) => runs.push((job, now)),
                // Periodic limits: what fits once fits at any time.
                Next::Refuse(job, error) => panic!("call {job} refused: {error:?}"),
                Next::WaitUntil(t) => {
                    assert!(t > now, "asked to wait until {t} at {now}");
                    now = next_arrival.map_or(t, |a| a.min(t));
                }
                Next::Idle => match next_arrival {
                    Some(t) => now = t,
                    None => return runs,
                },
            }
        }
    }

    fn algorithms() -> impl Strategy<Value = AnyAlgorithm> {
        let window_kinds = prop_oneof![
            Just(Kind::FixedWindow),
            Just(Kind::SlidingLog),
            Just(Kind::SlidingCounter)
        ];
        let bucket_kinds = prop_oneof![Just(Kind::TokenBucket), Just(Kind::LeakyBucket)];
        #[allow(clippy::cast_precision_loss)]
        let windows = (window_kinds, 1u64..8, 1u64..2_000)
            .prop_map(|(kind, limit, ms)| window(kind, limit as f64, ms as f64));
        #[allow(clippy::cast_precision_loss)]
        let buckets = (bucket_kinds, 1u64..8, 1u64..4, 1u64..2_000)
            .prop_map(|(kind, c, r, ms)| bucket(kind, c as f64, r as f64, ms as f64));
        prop_oneof![windows, buckets].prop_map(|options| algorithm(&options).unwrap())
    }

    proptest! {
        /// Calls run in arrival order, each at the first instant the algorithm admits it:
        /// replaying the runs through the core admits every one, and one tick earlier
        /// (when the call was already waiting) the core would have denied it.
        #[test]
        fn calls_run_in_order_at_the_first_admitted_instant(
            limit in algorithms(),
            gaps in proptest::collection::vec((0u64..300_000, 1u64..4), 1..40),
        ) {
            let arrivals: Vec<(Ticks, u64)> = gaps
                .iter()
                .scan(0, |t, &(gap, cost)| { *t += gap; Some((*t, cost)) })
                .filter(|&(_, cost)| limit.peek(None, 0, cost).retry_after.is_some())
                .collect();
            let runs = drive(&limit, &arrivals);
            prop_assert_eq!(runs.len(), arrivals.len());
            let (mut state, mut previous) = (None, 0);
            for (position, &(job, at)) in runs.iter().enumerate() {
                prop_assert_eq!(job, position);
                let (arrived, cost) = arrivals[job];
                let earliest = arrived.max(previous);
                prop_assert!(at >= earliest);
                if at > earliest {
                    prop_assert!(!limit.peek(state.clone(), at - 1, cost).allowed);
                }
                let (decision, next) = limit.decide(state, at, cost);
                prop_assert!(decision.allowed);
                state = next;
                previous = at;
            }
        }
    }

    #[test]
    fn pacing_runs_calls_exactly_a_slot_apart() {
        let pacing = algorithm(&bucket(Kind::Pacing, 100.0, 4.0, 1000.0)).unwrap();
        let runs = drive(&pacing, &[(0, 1), (0, 1), (0, 2), (10, 1)]);
        let times: Vec<Ticks> = runs.iter().map(|r| r.1).collect();
        assert_eq!(
            times,
            [0, 250 * MILLISECOND, 500 * MILLISECOND, 1000 * MILLISECOND]
        );
    }

    fn token_bucket() -> Scheduler<u32> {
        let any = algorithm(&bucket(Kind::TokenBucket, 2.0, 1.0, 1000.0)).unwrap();
        Scheduler::new(Limit::new(any).unwrap(), 3)
    }

    #[test]
    fn a_full_queue_and_a_cost_that_never_fits_are_refused() {
        let mut scheduler = token_bucket();
        for job in 0..3 {
            scheduler.push(job, 1, 0).unwrap();
        }
        let (job, reason) = scheduler.push(3, 1, 0).unwrap_err();
        assert_eq!((job, reason), (3, Error::QueueFull(3)));
        assert_eq!(
            Error::QueueFull(3).message(),
            "the throttle's queue is full: 3 calls are waiting"
        );
        scheduler.remove(|&job| job == 1);
        let (_, reason) = scheduler.push(4, 3, 0).unwrap_err();
        assert_eq!(reason, Error::NeverFits(3));
        scheduler.push(5, 2, 0).unwrap();
        assert_eq!(scheduler.len(), 3);
    }

    #[test]
    fn removed_calls_never_run_and_free_the_front() {
        let mut scheduler = token_bucket();
        for job in 0..3 {
            scheduler.push(job, 1, 0).unwrap();
        }
        assert_eq!(scheduler.next(0), Next::Run(0));
        assert_eq!(scheduler.next(0), Next::Run(1));
        assert_eq!(scheduler.next(0), Next::WaitUntil(SECOND));
        assert_eq!(scheduler.remove(|&job| job == 2), Some(2));
        assert_eq!(scheduler.next(0), Next::Idle);
    }

    #[test]
    fn a_pause_holds_every_call_then_the_limit_applies() {
        let mut scheduler = token_bucket();
        scheduler.push(0, 1, 0).unwrap();
        scheduler.pause_until(SECOND);
        scheduler.pause_until(10);
        assert_eq!(scheduler.next(0), Next::WaitUntil(SECOND));
        assert_eq!(scheduler.next(SECOND), Next::Run(0));
    }

    #[test]
    fn the_servers_budget_caps_the_local_limit_until_it_ends() {
        let mut scheduler = token_bucket();
        for job in 0..3 {
            scheduler.push(job, 1, 0).unwrap();
        }
        scheduler.set_budget(Budget {
            remaining: 1,
            until: 5 * SECOND,
        });
        assert_eq!(scheduler.next(0), Next::Run(0));
        // The bucket holds another token, but the server granted only one.
        assert_eq!(scheduler.next(0), Next::WaitUntil(5 * SECOND));
        assert_eq!(scheduler.next(5 * SECOND), Next::Run(1));
        assert_eq!(scheduler.next(5 * SECOND), Next::Run(2));
    }

    /// A calendar window's periods may begin long after tick 0: whether a cost fits is
    /// asked when the call is queued, where one decides.
    #[cfg(feature = "full")]
    #[test]
    fn a_calendar_window_on_the_callers_boundaries_runs_its_calls() {
        let options = crate::options::tests::calendar_options(Some(vec![1000.0, 2000.0, 3000.0]));
        let calendar = || Scheduler::new(Limit::new(algorithm(&options).unwrap()).unwrap(), 2);
        let mut scheduler = calendar();
        let now = 1500 * MILLISECOND;
        scheduler.push(0, 1, now).unwrap();
        scheduler.push(1, 2, now).unwrap();
        assert_eq!(scheduler.next(now), Next::Run(0));
        assert_eq!(scheduler.next(now), Next::WaitUntil(2 * SECOND));
        assert_eq!(scheduler.next(2 * SECOND), Next::Run(1));
        // Beyond the last boundary nothing is ever admitted.
        let (_, reason) = calendar().push(2, 1, 3 * SECOND).unwrap_err();
        assert_eq!(reason, Error::NeverFits(1));
    }

    /// Whether a cost fits a calendar window depends on when: a cost that fitted before
    /// its last boundary is refused after it, queued or waiting, never held for ever.
    #[cfg(feature = "full")]
    #[test]
    fn a_calendar_window_past_its_last_boundary_refuses_what_fitted_before() {
        let options = crate::options::tests::calendar_options(Some(vec![1000.0, 2000.0]));
        let mut scheduler = Scheduler::new(Limit::new(algorithm(&options).unwrap()).unwrap(), 4);
        let now = 1500 * MILLISECOND;
        scheduler.push(0, 2, now).unwrap();
        assert_eq!(scheduler.next(now), Next::Run(0));
        // Waits for the window's end, which is the calendar's.
        scheduler.push(1, 2, now).unwrap();
        assert_eq!(scheduler.next(now), Next::WaitUntil(2 * SECOND));
        assert_eq!(
            scheduler.next(2 * SECOND),
            Next::Refuse(1, Error::NeverFits(2))
        );
        assert_eq!(scheduler.next(2 * SECOND), Next::Idle);
        let (_, reason) = scheduler.push(2, 1, 2 * SECOND).unwrap_err();
        assert_eq!(reason, Error::NeverFits(1));
    }
}
