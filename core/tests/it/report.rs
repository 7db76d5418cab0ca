//! Reported costs, against models kept apart from the algorithms' own math: a bucket as
//! exact rational tokens that may go below zero, windows as counts per window, a log as
//! its list of entries. Random mixes of decisions, reports and refunds with a random
//! overdraft, at non-decreasing times, must admit, record, drop and report the standing
//! after each step (`remaining`, whether a zero cost fits, and when it will) exactly as
//! the model does; every state must survive its encoding.

use std::collections::HashMap;

use crate::common::*;
use proptest::prelude::*;
use sluicegate_core::{
    AnyAlgorithm, CalendarPeriod, CalendarWindow, Composite, FixedWindow, LeakyBucket, Report,
    SlidingCounter, SlidingLog, Ticks, TokenBucket,
};

/// One step: a decision of a cost, or a report of a signed adjustment.
#[derive(Debug, Clone, Copy)]
enum Op {
    Decide(u64),
    Report(i64),
}

/// A reference limit.
trait Model {
    /// Moves to `now`; whether `cost` fits.
    fn fits(&mut self, now: Ticks, cost: u64) -> bool;
    /// Takes `cost`, which fits.
    fn take(&mut self, cost: u64);
    /// Applies a report at `now`; the units recorded.
    fn adjust(&mut self, now: Ticks, adjustment: i64) -> u64;
    /// After the step: whole units remaining, and when a cost of zero fits (`Some(0)`:
    /// now).
    fn standing(&self, now: Ticks) -> (u64, Option<Ticks>);
}

/// What a step answers: allowed (decisions), units recorded (reports), and the standing.
type Answer = (bool, u64, u64, Option<Ticks>);

fn step(model: &mut impl Model, now: Ticks, op: Op) -> Answer {
    let (allowed, recorded) = match op {
        Op::Decide(cost) => {
            let allowed = model.fits(now, cost);
            if allowed {
                model.take(cost);
            }
            (allowed, 0)
        }
        Op::Report(adjustment) => (true, model.adjust(now, adjustment)),
    };
    let (remaining, zero_at) = model.standing(now);
    (allowed, recorded, remaining, zero_at)
}

/// Drives the algorithm `at(now)` returns and `model` through the same steps.
fn matches<A: Report>(at: impl Fn(Ticks) -> A, mut model: impl Model, steps: &[(Ticks, Op)]) {
    let mut state = None;
    for (i, &(now, op)) in steps.iter().enumerate() {
        let alg = at(now);
        let (allowed, recorded) = match op {
            Op::Decide(cost) => {
                let (d, s) = alg.decide(state.clone(), now, cost);
                state = s;
                (d.allowed, 0)
            }
            Op::Report(adjustment) => {
                let (r, s) = alg.report(state.clone(), now, adjustment);
                assert_eq!(r.recorded + r.dropped, adjustment.unsigned_abs());
                assert_eq!(r.decision, alg.peek(s.clone(), now, 0));
                state = s;
                (true, r.recorded)
            }
        };
        let zero = alg.peek(state.clone(), now, 0);
        let zero_at = if zero.allowed {
            Some(0)
        } else {
            zero.retry_after
        };
        let got = (allowed, recorded, zero.remaining, zero_at);
        assert_eq!(got, step(&mut model, now, op), "step {i} {op:?} at {now}");
        if let Some(s) = &state {
            let bytes = alg.encode_to_vec(s);
            assert_eq!(alg.decode(&bytes).as_ref(), Ok(s));
        }
    }
}

/// Steps from raw arrivals: a decision of the cost, or a report of it (times one or
/// three, to pass the bounds), added or given back.
fn steps(raw: &[RawArrival], ops: &[u8], period: Ticks, limit: u64) -> Vec<(Ticks, Op)> {
    arrivals(raw, period, limit)
        .into_iter()
        .zip(ops.iter().cycle())
        .map(|((now, cost), &op)| {
            let units = i64::try_from(cost).unwrap() * if op & 4 == 0 { 1 } else { 3 };
            let op = match op % 3 {
                0 => Op::Decide(cost),
                1 => Op::Report(units),
                _ => Op::Report(-units),
            };
            (now, op)
        })
        .collect()
}

/// Tokens in units of `1 / period`, from `−overdraft` to the capacity, starting full.
struct Bucket {
    capacity: i128,
    overdraft: i128,
    rate: i128,
    period: i128,
    scaled: i128,
    at: Option<Ticks>,
}

impl Bucket {
    fn new(capacity: u64, overdraft: u64, rate: u64, period: Ticks) -> Self {
        Self {
            capacity: capacity.into(),
            overdraft: overdraft.into(),
            rate: rate.into(),
            period: period.into(),
            scaled: i128::from(capacity) * i128::from(period),
            at: None,
        }
    }

    fn advance(&mut self, now: Ticks) {
        let elapsed = i128::from(now - self.at.unwrap_or(now));
        self.scaled = (self.capacity * self.period).min(self.scaled + elapsed * self.rate);
        self.at = Some(now);
    }
}

impl Model for Bucket {
    fn fits(&mut self, now: Ticks, cost: u64) -> bool {
        self.advance(now);
        self.scaled >= i128::from(cost) * self.period
    }

    fn take(&mut self, cost: u64) {
        self.scaled -= i128::from(cost) * self.period;
    }

    fn adjust(&mut self, now: Ticks, adjustment: i64) -> u64 {
        self.advance(now);
        let units = i128::from(adjustment.unsigned_abs());
        let recorded = if adjustment >= 0 {
            // Whole units down to `−overdraft` tokens.
            let room = (self.scaled + self.overdraft * self.period) / self.period;
            let recorded = units.min(room);
            self.scaled -= recorded * self.period;
            recorded
        } else {
            // Whole units (the last in part) up to full.
            let full = self.capacity * self.period;
            let owed = (full - self.scaled + self.period - 1) / self.period;
            let recorded = units.min(owed);
            self.scaled = full.min(self.scaled + recorded * self.period);
            recorded
        };
        u64::try_from(recorded).unwrap()
    }

    fn standing(&self, _: Ticks) -> (u64, Option<Ticks>) {
        let remaining = u64::try_from(self.scaled.max(0) / self.period).unwrap();
        // A debt refills at `rate` per tick, rounded up to a whole tick.
        let debt = (-self.scaled).max(0);
        let zero_at = u64::try_from((debt + self.rate - 1) / self.rate).unwrap();
        (remaining, Some(zero_at))
    }
}

/// Counts per window (windows from `bounds`), up to `limit + overdraft`; the sliding
/// estimate `prev·(P − e)/P + cur` when `sliding` (aligned windows of `period`).
struct Windows {
    limit: u64,
    overdraft: u64,
    sliding: Option<Ticks>,
    bounds: Box<dyn Fn(Ticks) -> (Ticks, Ticks)>,
    counts: HashMap<Ticks, u64>,
    now: Ticks,
}

impl Windows {
    fn aligned(limit: u64, overdraft: u64, period: Ticks, sliding: bool) -> Self {
        Self {
            limit,
            overdraft,
            sliding: sliding.then_some(period),
            bounds: Box::new(move |now| (now / period * period, now / period * period + period)),
            counts: HashMap::new(),
            now: 0,
        }
    }

    /// The current count, and the previous window's weight `prev·(P − e)` over `P`.
    fn counts(&self) -> (u64, u128, u128) {
        let (start, end) = (self.bounds)(self.now);
        let cur = self.counts.get(&start).copied().unwrap_or(0);
        match self.sliding {
            Some(p) if start >= p => {
                let prev = self.counts.get(&(start - p)).copied().unwrap_or(0);
                (
                    cur,
                    u128::from(prev) * u128::from(end - self.now),
                    u128::from(p),
                )
            }
            _ => (cur, 0, 1),
        }
    }

    fn cur(&mut self) -> &mut u64 {
        let start = (self.bounds)(self.now).0;
        self.counts.entry(start).or_insert(0)
    }
}

impl Model for Windows {
    fn fits(&mut self, now: Ticks, cost: u64) -> bool {
        self.now = now;
        let (cur, carried, p) = self.counts();
        carried + u128::from(cur + cost) * p <= u128::from(self.limit) * p
    }

    fn take(&mut self, cost: u64) {
        *self.cur() += cost;
    }

    fn adjust(&mut self, now: Ticks, adjustment: i64) -> u64 {
        self.now = now;
        let (cur, carried, p) = self.counts();
        let units = adjustment.unsigned_abs();
        if adjustment >= 0 {
            let most = (u128::from(self.limit + self.overdraft) * p - carried) / p;
            let recorded = units.min(u64::try_from(most).unwrap().saturating_sub(cur));
            *self.cur() += recorded;
            recorded
        } else {
            let recorded = units.min(cur);
            *self.cur() -= recorded;
            recorded
        }
    }

    fn standing(&self, now: Ticks) -> (u64, Option<Ticks>) {
        let (cur, carried, p) = self.counts();
        let remaining = self
            .limit
            .saturating_sub(cur)
            .saturating_sub(u64::try_from(carried.div_ceil(p)).unwrap());
        if carried + u128::from(cur) * p <= u128::from(self.limit) * p {
            return (remaining, Some(0));
        }
        let (start, end) = (self.bounds)(now);
        let p = u64::try_from(p).unwrap();
        // The first elapsed time `e` in a window at which `weight·(P − e) <= room·P`.
        let first_fit = |weight: u64, room: u64| {
            let fits = u128::from(room) * u128::from(p) / u128::from(weight);
            p - u64::try_from(fits).unwrap().min(p)
        };
        let zero_at = match self.sliding {
            None => end - now,
            Some(_) if cur <= self.limit => {
                let prev = u64::try_from(carried / u128::from(end - now)).unwrap();
                first_fit(prev, self.limit - cur) - (now - start)
            }
            Some(_) => end - now + first_fit(cur, self.limit),
        };
        (remaining, Some(zero_at))
    }
}

/// Every entry ever logged; the window holds those after `now − period`.
struct Log {
    limit: u64,
    overdraft: u64,
    period: Ticks,
    entries: Vec<(Ticks, u64)>,
    now: Ticks,
}

impl Log {
    fn used(&self, at: Ticks) -> u64 {
        self.entries
            .iter()
            .filter(|e| e.0 + self.period > at)
            .map(|e| e.1)
            .sum()
    }
}

impl Model for Log {
    fn fits(&mut self, now: Ticks, cost: u64) -> bool {
        self.now = now;
        self.used(now) + cost <= self.limit
    }

    fn take(&mut self, cost: u64) {
        self.entries.push((self.now, cost));
    }

    fn adjust(&mut self, now: Ticks, adjustment: i64) -> u64 {
        self.now = now;
        let used = self.used(now);
        let units = adjustment.unsigned_abs();
        if adjustment >= 0 {
            let recorded = units.min((self.limit + self.overdraft).saturating_sub(used));
            self.entries.push((now, recorded));
            return recorded;
        }
        // Newest entries first.
        let recorded = units.min(used);
        let mut owed = recorded;
        for entry in self.entries.iter_mut().rev() {
            let taken = owed.min(entry.1);
            entry.1 -= taken;
            owed -= taken;
        }
        recorded
    }

    fn standing(&self, now: Ticks) -> (u64, Option<Ticks>) {
        let used = self.used(now);
        let zero_at = std::iter::once(now)
            .chain(self.entries.iter().map(|e| e.0 + self.period))
            .filter(|&t| t >= now && self.used(t) <= self.limit)
            .min()
            .map(|t| t - now);
        (self.limit.saturating_sub(used), zero_at)
    }
}

/// Two limits at once, as a composite decides them.
struct Both<A, B>(A, B);

impl<A: Model, B: Model> Model for Both<A, B> {
    fn fits(&mut self, now: Ticks, cost: u64) -> bool {
        let a = self.0.fits(now, cost);
        self.1.fits(now, cost) && a
    }

    fn take(&mut self, cost: u64) {
        self.0.take(cost);
        self.1.take(cost);
    }

    fn adjust(&mut self, now: Ticks, adjustment: i64) -> u64 {
        let a = self.0.adjust(now, adjustment);
        self.1.adjust(now, adjustment).min(a)
    }

    fn standing(&self, now: Ticks) -> (u64, Option<Ticks>) {
        let (a, b) = (self.0.standing(now), self.1.standing(now));
        (a.0.min(b.0), a.1.max(b.1))
    }
}

fn small_period() -> impl Strategy<Value = Ticks> {
    prop_oneof![1..=10u64, 1..=10_000u64, 1..=1_000_000_000u64]
}

fn overdraft(limit: u64) -> impl Strategy<Value = u64> {
    prop_oneof![Just(0), 1..=4u64, 0..=2 * limit]
}

fn ops() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 1..8)
}

proptest! {
    /// The token bucket and the leaky bucket (the same tokens seen as water).
    #[test]
    fn buckets_report_as_the_model(
        capacity in limit(1000), rate in limit(1000), period in small_period(),
        od in overdraft(1000), raw in raw_arrivals(), ops in ops(),
    ) {
        let steps = steps(&raw, &ops, period, capacity);
        let bucket = TokenBucket::new(capacity, rate, period).unwrap().with_overdraft(od).unwrap();
        matches(|_| bucket, Bucket::new(capacity, od, rate, period), &steps);
        let funnel = LeakyBucket::new(capacity, rate, period).unwrap().with_overdraft(od).unwrap();
        matches(|_| funnel, Bucket::new(capacity, od, rate, period), &steps);
    }

    /// The fixed window, the sliding counter and the sliding log, on the same steps.
    #[test]
    fn windows_report_as_the_model(
        limit in limit(1000), period in small_period(), od in overdraft(1000),
        raw in raw_arrivals(), ops in ops(),
    ) {
        let steps = steps(&raw, &ops, period, limit);
        let fixed = FixedWindow::new(limit, period).unwrap().with_overdraft(od).unwrap();
        matches(|_| fixed, Windows::aligned(limit, od, period, false), &steps);
        let counter = SlidingCounter::new(limit, period).unwrap().with_overdraft(od).unwrap();
        matches(|_| counter, Windows::aligned(limit, od, period, true), &steps);
        let log = SlidingLog::new(limit, period).unwrap().with_overdraft(od).unwrap();
        let model = Log { limit, overdraft: od, period, entries: Vec::new(), now: 0 };
        matches(|_| log, model, &steps);
    }

    /// Periods of uneven lengths (days of 23 to 25 hours, months of 28 to 31 days).
    #[test]
    fn calendar_window_reports_as_the_model(
        limit in limit(1000), od in overdraft(1000), base in small_period(),
        lengths in prop::collection::vec(0..4u64, 1..8), raw in raw_arrivals(), ops in ops(),
    ) {
        // The lengths repeat: find the cycle holding `now`, then the period in it.
        let bounds = move |now: Ticks| {
            let lengths: Vec<Ticks> = lengths.iter().map(|l| base + l * (base / 24 + 1)).collect();
            let cycle: Ticks = lengths.iter().sum();
            let mut start = now / cycle * cycle;
            for len in lengths {
                if now < start + len {
                    return (start, start + len);
                }
                start += len;
            }
            unreachable!()
        };
        let steps = steps(&raw, &ops, base, limit);
        let window = CalendarWindow::new(limit).unwrap().with_overdraft(od).unwrap();
        let bounds_at = bounds.clone();
        let at = move |now| {
            let (start, end) = bounds_at(now);
            window.during(CalendarPeriod::new(start, end).unwrap())
        };
        let model = Windows {
            limit, overdraft: od, sliding: None, bounds: Box::new(bounds),
            counts: HashMap::new(), now: 0,
        };
        matches(at, model, &steps);
    }

    /// A composite charges each member within its own overdraft.
    #[test]
    fn composite_reports_as_its_members(
        capacity in limit(1000), rate in limit(1000), period in small_period(),
        limit in limit(1000), od in overdraft(1000), od2 in overdraft(1000),
        raw in raw_arrivals(), ops in ops(),
    ) {
        let steps = steps(&raw, &ops, period, capacity.min(limit));
        let composite = Composite::<AnyAlgorithm>::new(vec![
            TokenBucket::new(capacity, rate, period).unwrap().with_overdraft(od).unwrap().into(),
            FixedWindow::new(limit, period).unwrap().with_overdraft(od2).unwrap().into(),
        ]).unwrap();
        let model = Both(
            Bucket::new(capacity, od, rate, period),
            Windows::aligned(limit, od2, period, false),
        );
        matches(|_| composite.clone(), model, &steps);
    }
}
