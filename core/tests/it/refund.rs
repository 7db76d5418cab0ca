//! The refund and take transitions, against reference definitions kept apart from the
//! algorithms' own math: a token bucket as exact rationals, a window as counts per
//! window. Random mixes of decisions, takes and refunds at non-decreasing times must
//! admit, take and report `remaining` exactly as the reference does.

use std::collections::HashMap;

use crate::common::*;
use proptest::prelude::*;
use sluicegate_core::{Algorithm, FixedWindow, Refund, SlidingCounter, Ticks, TokenBucket};

/// What a step does with its cost: decide it, take up to it, or give it back.
#[derive(Debug, Clone, Copy)]
enum Op {
    Decide,
    Take,
    Refund,
}

/// A reference limit: applies a step and returns what the algorithm must answer:
/// (allowed, units taken, remaining afterwards).
trait Reference {
    fn step(&mut self, op: Op, now: Ticks, cost: u64) -> (bool, u64, u64);
}

/// Drives `algorithm` and `reference` through the same steps.
fn matches<A: Refund, R: Reference>(algorithm: &A, mut reference: R, steps: &[(Op, Ticks, u64)]) {
    let mut state = None;
    for (i, &(op, now, cost)) in steps.iter().enumerate() {
        let got = match op {
            Op::Decide => {
                let (d, s) = algorithm.decide(state.clone(), now, cost);
                state = s;
                (d.allowed, if d.allowed { cost } else { 0 }, d.remaining)
            }
            Op::Take => {
                let (taken, d, s) = algorithm.take(state.clone(), now, cost);
                state = s;
                (true, taken, d.remaining)
            }
            Op::Refund => {
                state = algorithm.refund(state.clone(), now, cost);
                (true, 0, algorithm.peek(state.clone(), now, 0).remaining)
            }
        };
        assert_eq!(
            got,
            reference.step(op, now, cost),
            "step {i} {op:?} at {now} cost {cost}"
        );
        // A state equal to fresh is `None`, never a stored copy of fresh.
        if let Some(s) = &state {
            let bytes = algorithm.encode_to_vec(s);
            assert_eq!(algorithm.decode(&bytes).as_ref(), Ok(s));
        }
    }
}

fn steps(raw: &[RawArrival], ops: &[u8], period: Ticks, limit: u64) -> Vec<(Op, Ticks, u64)> {
    arrivals(raw, period, limit)
        .into_iter()
        .zip(ops.iter().cycle())
        .map(|((now, cost), op)| {
            let op = [Op::Decide, Op::Take, Op::Refund][usize::from(op % 3)];
            (op, now, cost)
        })
        .collect()
}

/// Tokens in units of `1 / period`: `min(B·P, level + elapsed·R)`, starting full.
struct Bucket {
    capacity: u128,
    rate: u128,
    period: u128,
    scaled: u128,
    at: Option<Ticks>,
}

impl Reference for Bucket {
    fn step(&mut self, op: Op, now: Ticks, cost: u64) -> (bool, u64, u64) {
        let full = self.capacity * self.period;
        let elapsed = u128::from(now - self.at.unwrap_or(now));
        self.scaled = full.min(self.scaled + elapsed * self.rate);
        self.at = Some(now);
        let unit = |n: u64| u128::from(n) * self.period;
        let whole = |s: u128| u64::try_from(s / self.period).unwrap();
        let (allowed, taken) = match op {
            Op::Decide => {
                let allowed = self.scaled >= unit(cost);
                (allowed, if allowed { cost } else { 0 })
            }
            Op::Take => (true, cost.min(whole(self.scaled))),
            Op::Refund => {
                self.scaled = full.min(self.scaled + unit(cost));
                (true, 0)
            }
        };
        self.scaled -= unit(taken);
        (allowed, taken, whole(self.scaled))
    }
}

/// Counts per aligned window; the sliding estimate `prev·(P − e)/P + cur` when `sliding`.
struct Windows {
    limit: u64,
    period: Ticks,
    sliding: bool,
    counts: HashMap<u64, u64>,
}

impl Reference for Windows {
    fn step(&mut self, op: Op, now: Ticks, cost: u64) -> (bool, u64, u64) {
        let (p, w, e) = (self.period, now / self.period, now % self.period);
        let prev = if self.sliding && w > 0 {
            self.counts.get(&(w - 1)).copied().unwrap_or(0)
        } else {
            0
        };
        // prev·(P − e), over P.
        let carried = u128::from(prev) * u128::from(p - e);
        let cur = self.counts.entry(w).or_insert(0);
        let fits = |cur: u64, c: u64| {
            c <= self.limit
                && carried + u128::from(cur + c) * u128::from(p)
                    <= u128::from(self.limit) * u128::from(p)
        };
        let remaining = |cur: u64| {
            let carried = u64::try_from(carried.div_ceil(u128::from(p))).unwrap();
            self.limit.saturating_sub(cur).saturating_sub(carried)
        };
        let (allowed, taken) = match op {
            Op::Decide => {
                let allowed = fits(*cur, cost);
                (allowed, if allowed { cost } else { 0 })
            }
            Op::Take => (true, cost.min(remaining(*cur))),
            Op::Refund => {
                *cur -= cost.min(*cur);
                (true, 0)
            }
        };
        *cur += taken;
        (allowed, taken, remaining(*cur))
    }
}

fn small_period() -> impl Strategy<Value = Ticks> {
    prop_oneof![1..=10u64, 1..=10_000u64, 1..=1_000_000_000u64]
}

proptest! {
    #[test]
    fn token_bucket_refund_and_take_match_definition(
        capacity in limit(1000), rate in limit(1000), period in small_period(),
        raw in raw_arrivals(), ops in prop::collection::vec(any::<u8>(), 1..8),
    ) {
        let bucket = TokenBucket::new(capacity, rate, period).unwrap();
        let reference = Bucket {
            capacity: capacity.into(), rate: rate.into(), period: period.into(),
            scaled: u128::from(capacity) * u128::from(period), at: None,
        };
        matches(&bucket, reference, &steps(&raw, &ops, period, capacity));
    }

    /// The fixed window and the sliding counter, over the same steps.
    #[test]
    fn window_refund_and_take_match_definition(
        limit in limit(1000), period in small_period(),
        raw in raw_arrivals(), ops in prop::collection::vec(any::<u8>(), 1..8),
    ) {
        let steps = steps(&raw, &ops, period, limit);
        let reference = |sliding| Windows { limit, period, sliding, counts: HashMap::new() };
        matches(&FixedWindow::new(limit, period).unwrap(), reference(false), &steps);
        matches(&SlidingCounter::new(limit, period).unwrap(), reference(true), &steps);
    }
}

/// A refund never lifts a bucket above its capacity, however many units come back.
#[test]
fn bucket_refund_stops_at_capacity() {
    let bucket = TokenBucket::new(10, 1, 1000).unwrap();
    let (_, state) = bucket.decide(None, 0, 4);
    assert_eq!(bucket.refund(state, 0, u64::MAX), None);
    let (taken, d, state) = bucket.take(None, 0, 25);
    assert_eq!((taken, d.remaining), (10, 0));
    assert_eq!(bucket.peek(bucket.refund(state, 0, 3), 0, 0).remaining, 3);
}

/// Units given back after their window ended do not come off the next window's count.
#[test]
fn window_refund_after_the_window_changes_nothing_new() {
    let window = FixedWindow::new(10, 100).unwrap();
    let (_, state) = window.decide(None, 150, 6);
    let (_, state) = window.decide(state, 250, 7);
    let state = window.refund(state, 260, 5);
    assert_eq!(window.peek(state, 260, 0).remaining, 8);
    let counter = SlidingCounter::new(10, 100).unwrap();
    let (_, state) = counter.decide(None, 150, 6);
    let state = counter.refund(state, 200, 6);
    // The previous window's 6 still weigh fully at the start of the next.
    assert_eq!(counter.peek(state, 200, 0).remaining, 4);
}
