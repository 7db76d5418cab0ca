//! `AnyAlgorithm::carry_from`: a key's use carried across a change of its limit's
//! parameters.
//!
//! Properties, over random pairs of parameters of one kind and states reached by
//! deciding random arrivals under the old ones:
//! - (a) the carried state encodes and decodes under the new parameters, unchanged;
//! - (b) the new limit has exactly `new_limit − used` left at `now` (none if the use
//!   passes it), `used` being the old limit less what it had left (`limit − remaining`
//!   of a peek of cost 0): for a fixed window, sliding counter and sliding log of the
//!   same period, a calendar window of the same calendar, and a token bucket, funnel or
//!   pacing queue of any capacity, rate and period (its use, rounded up to whole units,
//!   is kept exactly). Across periods a window's use is another window's, and a ban's or
//!   a composite's `remaining` is its binding part's: those are checked by (a) and (c);
//! - (c) carried into the same parameters, a state decides every later request as before.

use std::sync::Arc;

use crate::common::*;
use proptest::prelude::*;
use sluicegate_core::calendar::{CalendarLimit, CalendarPeriod, CalendarPeriods, CalendarWindow};
use sluicegate_core::limits::{MAX_LIMIT, MAX_LOG_LIMIT};
use sluicegate_core::{
    Algorithm, AnyAlgorithm, AnyState, Ban, Composite, FixedWindow, LeakyBucket, Pacing,
    SlidingCounter, SlidingLog, Ticks, TokenBucket, SECOND,
};

const MINUTE: Ticks = 60 * SECOND;
const DAY: Ticks = 24 * 60 * MINUTE;

/// Periods of one length from tick 0: a calendar without a time-zone database.
#[derive(Debug)]
struct Every(Ticks);

impl CalendarPeriods for Every {
    fn period_at(&self, now: Ticks) -> CalendarPeriod {
        let start = now - now % self.0;
        CalendarPeriod::new(start, start + self.0).unwrap()
    }

    fn name(&self) -> String {
        format!("every {} ticks", self.0)
    }
}

fn calendar(limit: u64, overdraft: u64, length: Ticks) -> Option<AnyAlgorithm> {
    let window = CalendarWindow::new(limit)
        .ok()?
        .with_overdraft(overdraft)
        .ok()?;
    Some(CalendarLimit::new(window, Arc::new(Every(length))).into())
}

/// The kinds under test, one per variant (a ban and a composite of plain limits).
const KINDS: u8 = 9;

/// One side of a change: parameters an algorithm of each kind is built from.
#[derive(Debug, Clone, Copy)]
struct Side {
    limit: u64,
    rate: u64,
    period: Ticks,
    overdraft: u64,
}

fn side() -> impl Strategy<Value = Side> {
    let overdraft = prop_oneof![Just(0), 0..=10u64, 0..=MAX_LIMIT];
    (limit(MAX_LIMIT), limit(MAX_LIMIT), period(), overdraft).prop_map(
        |(limit, rate, period, overdraft)| Side {
            limit,
            rate,
            period,
            overdraft,
        },
    )
}

/// The algorithm of `kind` on `side`; `None` where its constructor refuses them.
fn build(kind: u8, s: Side) -> Option<AnyAlgorithm> {
    let log_limit = 1 + s.limit % MAX_LOG_LIMIT;
    let log_overdraft = s.overdraft % MAX_LOG_LIMIT;
    let window = || FixedWindow::new(s.limit, s.period)?.with_overdraft(s.overdraft);
    let bucket = || TokenBucket::new(s.limit, s.rate, s.period)?.with_overdraft(s.overdraft);
    Some(match kind {
        0 => window().ok()?.into(),
        1 => SlidingCounter::new(s.limit, s.period)
            .and_then(|c| c.with_overdraft(s.overdraft))
            .ok()?
            .into(),
        2 => SlidingLog::new(log_limit, s.period)
            .and_then(|l| l.with_overdraft(log_overdraft))
            .ok()?
            .into(),
        3 => bucket().ok()?.into(),
        4 => LeakyBucket::new(s.limit, s.rate, s.period)
            .and_then(|b| b.with_overdraft(s.overdraft))
            .ok()?
            .into(),
        5 => Pacing::new(s.limit - 1, s.rate, s.period).ok()?.into(),
        6 => calendar(s.limit, s.overdraft, s.period)?,
        7 => {
            let inner: AnyAlgorithm = window().ok()?.into();
            Ban::new(inner, s.overdraft % 8, s.period, s.period)
                .ok()?
                .into()
        }
        _ => Composite::new(vec![window().ok()?.into(), bucket().ok()?.into()])
            .ok()?
            .into(),
    })
}

/// Whether property (b) holds between the two sides of `kind`: windows of one period,
/// and buckets.
fn exact(kind: u8, same_period: bool) -> bool {
    match kind {
        0 | 1 | 2 | 6 => same_period,
        3..=5 => true,
        _ => false,
    }
}

/// The state `arrivals` leave under `algorithm`.
fn reach(algorithm: &AnyAlgorithm, arrivals: &[(Ticks, u64)]) -> Option<AnyState> {
    arrivals.iter().fold(None, |state, &(now, cost)| {
        algorithm.decide(state, now, cost).1
    })
}

/// The units `algorithm` has used at `now`: its limit less what it has left.
fn used(algorithm: &AnyAlgorithm, state: Option<AnyState>, now: Ticks) -> u64 {
    let d = algorithm.peek(state, now, 0);
    d.limit - d.remaining
}

/// `state` carried from `from` to `to` at `now`, checked to round-trip (a).
fn carried(
    to: &AnyAlgorithm,
    from: &AnyAlgorithm,
    state: &Option<AnyState>,
    now: Ticks,
) -> Option<AnyState> {
    let carried = state.as_ref().and_then(|s| to.carry_from(from, s, now));
    if let Some(c) = &carried {
        let bytes = to.encode_to_vec(c);
        assert_eq!(to.decode(&bytes).as_ref(), Ok(c), "{bytes:?}");
    }
    carried
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn a_carried_state_round_trips_and_keeps_the_use(
        kind in 0..KINDS,
        old in side(),
        mut new in side(),
        same_period: bool,
        raw in raw_arrivals(),
        gap: u64,
    ) {
        if same_period {
            new.period = old.period;
        }
        let (Some(from), Some(to)) = (build(kind, old), build(kind, new)) else {
            return Ok(());
        };
        let arrivals = arrivals(&raw, old.period, old.limit);
        let state = reach(&from, &arrivals);
        let now = arrivals.last().map_or(0, |a| a.0) + after(gap, old.period);
        let carried = carried(&to, &from, &state, now);
        if exact(kind, same_period) {
            let used = used(&from, state, now);
            let d = to.peek(carried, now, 0);
            prop_assert_eq!(d.remaining, d.limit.saturating_sub(used));
        }
    }

    #[test]
    fn carried_into_the_same_parameters_a_state_decides_as_before(
        kind in 0..KINDS,
        params in side(),
        raw in raw_arrivals(),
        later in raw_arrivals(),
        gap: u64,
    ) {
        let Some(algorithm) = build(kind, params) else {
            return Ok(());
        };
        let arrivals = arrivals(&raw, params.period, params.limit);
        let state = reach(&algorithm, &arrivals);
        let now = arrivals.last().map_or(0, |a| a.0) + after(gap, params.period);
        let carried = carried(&algorithm, &algorithm, &state, now);
        let (mut before, mut after) = (state, carried);
        for (at, cost) in arrivals_after(&later, now, params) {
            let (d_before, s_before) = algorithm.decide(before, at, cost);
            let (d_after, s_after) = algorithm.decide(after, at, cost);
            prop_assert_eq!(d_before, d_after);
            (before, after) = (s_before, s_after);
        }
    }
}

/// A gap after the last arrival: a few ticks, or up to two periods.
fn after(gap: u64, period: Ticks) -> Ticks {
    if gap % 2 == 0 {
        gap % 4
    } else {
        gap % (2 * period + 1)
    }
}

/// Random arrivals from `now` on.
fn arrivals_after(raw: &[RawArrival], now: Ticks, side: Side) -> Vec<(Ticks, u64)> {
    let later = arrivals(raw, side.period, side.limit);
    let first = later.first().map_or(0, |a| a.0);
    later
        .into_iter()
        .map(|(at, cost)| (now + (at - first), cost))
        .collect()
}

/// How many of `count` requests of cost 1 at `now` `algorithm` admits from `state`.
fn admitted(algorithm: &AnyAlgorithm, mut state: Option<AnyState>, now: Ticks) -> u64 {
    let mut admitted = 0;
    for _ in 0..10 {
        let (d, next) = algorithm.decide(state, now, 1);
        admitted += u64::from(d.allowed);
        state = next;
    }
    admitted
}

/// The state after `n` admitted requests of cost 1 at `now`.
fn spent(algorithm: &AnyAlgorithm, n: u64, now: Ticks) -> Option<AnyState> {
    (0..n).fold(None, |state, _| {
        let (d, state) = algorithm.decide(state, now, 1);
        assert!(d.allowed);
        state
    })
}

fn fixed(limit: u64) -> AnyAlgorithm {
    FixedWindow::new(limit, MINUTE).unwrap().into()
}

/// Issue 47, finding 9: a raise from 3 to 5 with 1 used admits 4 more at once.
#[test]
fn a_raised_window_admits_the_rest_of_the_new_limit_at_once() {
    let now = 10 * MINUTE + 5 * SECOND;
    let (old, new) = (fixed(3), fixed(5));
    let state = spent(&old, 1, now).unwrap();
    let carried = new.carry_from(&old, &state, now + SECOND);
    assert_eq!(admitted(&new, carried, now + SECOND), 4);
}

/// A cut from 5 to 2 with 3 used refuses until the old window ends.
#[test]
fn a_cut_window_refuses_until_its_window_ends() {
    let now = 10 * MINUTE + 5 * SECOND;
    let (old, new) = (fixed(5), fixed(2));
    let state = spent(&old, 3, now).unwrap();
    let carried = new.carry_from(&old, &state, now);
    let (d, carried) = new.decide(carried, now, 1);
    assert!(!d.allowed);
    assert_eq!(d.reset_after, 11 * MINUTE - now);
    assert_eq!(d.retry_after, Some(11 * MINUTE - now));
    assert!(new.decide(carried, 11 * MINUTE, 1).0.allowed);
}

/// A token bucket raised from capacity 3 to 5 with 1 token used has 4 at once.
#[test]
fn a_raised_bucket_holds_the_rest_of_its_new_capacity() {
    let now = 1_000 * SECOND;
    let old: AnyAlgorithm = TokenBucket::new(3, 3, MINUTE).unwrap().into();
    let new: AnyAlgorithm = TokenBucket::new(5, 5, MINUTE).unwrap().into();
    let state = spent(&old, 1, now).unwrap();
    let carried = new.carry_from(&old, &state, now);
    assert_eq!(admitted(&new, carried, now), 4);
}

/// A daily calendar window raised from 2 to 4 with 2 used admits 2 more today, and the
/// count ends with the day.
#[test]
fn a_raised_daily_window_admits_the_rest_of_the_day() {
    let now = 3 * DAY + 7 * 3600 * SECOND;
    let old = calendar(2, 0, DAY).unwrap();
    let new = calendar(4, 0, DAY).unwrap();
    let state = spent(&old, 2, now).unwrap();
    let carried = new.carry_from(&old, &state, now);
    let d = new.peek(carried.clone(), now, 0);
    assert_eq!((d.remaining, d.reset_after), (2, 4 * DAY - now));
    assert_eq!(admitted(&new, carried, now), 2);
}

#[test]
fn other_kinds_and_shapes_carry_nothing() {
    let now = 10 * MINUTE;
    let window = fixed(3);
    let state = spent(&window, 1, now).unwrap();
    let bucket: AnyAlgorithm = TokenBucket::new(3, 3, MINUTE).unwrap().into();
    assert_eq!(bucket.carry_from(&window, &state, now), None);
    let one = Composite::new(vec![fixed(3)]).unwrap().into();
    let two: AnyAlgorithm = Composite::new(vec![fixed(3), fixed(4)]).unwrap().into();
    let composite_state = spent(&one, 1, now).unwrap();
    assert_eq!(two.carry_from(&one, &composite_state, now), None);
    // A state that ended by `now` carries nothing either.
    assert_eq!(fixed(5).carry_from(&window, &state, now + MINUTE), None);
}
