//! The last periods before `MAX_TICKS`: every decision there is exact, for every
//! algorithm, reservations included; a `now` beyond it is decided as at `MAX_TICKS`
//! and refused by [`check_now`].
//!
//! Exactness is checked two ways: against the reference models (exact integer
//! arithmetic with no upper bound) and by translation, since every algorithm decides a
//! trace moved by a multiple of its alignment exactly as the trace itself.

use crate::common::*;
use proptest::prelude::*;
use sluicegate_core::limits::{MAX_LOG_LIMIT, MAX_WAIT};
use sluicegate_core::*;

/// One transition of `A`: a decision or a reservation.
type Step<A> = dyn Fn(
    &A,
    Option<<A as Algorithm>::State>,
    Ticks,
    u64,
) -> (Decision, Option<<A as Algorithm>::State>);

/// Runs the arrivals drawn from `raw` as drawn and moved to the top of the range by a
/// multiple of `align`: every decision at the top equals the one as drawn, field for
/// field, and every state at the top round-trips its encoding (the decoder accepts
/// what the core writes there). Plain decisions also keep every promise of
/// [`check_promises`] (a reservation's `retry_after` is for the same reservation).
#[allow(clippy::too_many_arguments)]
fn same_at_the_top<A: Algorithm>(
    alg: &A,
    align: Ticks,
    period: Ticks,
    limit: u64,
    raw: &[RawArrival],
    end: u64,
    step: &Step<A>,
    plain: bool,
) {
    let low = arrivals(raw, period, limit);
    let top = at_the_top(&low, align, period, end);
    let promises = |now, cost, decision: &Decision, next: &Option<A::State>| {
        if let Some(state) = next {
            assert_eq!(alg.decode(&alg.encode_to_vec(state)).as_ref(), Ok(state));
        }
        if plain {
            check_promises(alg, 10 * period, now, cost, decision, next);
        }
    };
    let (mut low_state, mut top_state) = (None, None);
    for (&(at, cost), &(top_at, _)) in low.iter().zip(&top) {
        let (expected, next) = step(alg, low_state.take(), at, cost);
        promises(at, cost, &expected, &next);
        low_state = next;
        let (got, next) = step(alg, top_state.take(), top_at, cost);
        promises(top_at, cost, &got, &next);
        assert_eq!(got, expected, "at {top_at} (moved from {at})");
        top_state = next;
    }
}

fn decide<A: Algorithm>(
    alg: &A,
    state: Option<A::State>,
    now: Ticks,
    cost: u64,
) -> (Decision, Option<A::State>) {
    alg.decide(state, now, cost)
}

/// Reservations with `max_wait` up to and beyond [`MAX_WAIT`].
fn max_wait() -> impl Strategy<Value = Ticks> {
    prop_oneof![
        0..10u64,
        0..=10 * SECOND,
        Just(MAX_WAIT),
        Just(Ticks::MAX),
        any::<u64>()
    ]
}

fn small_bucket() -> impl Strategy<Value = (u64, u64, Ticks)> {
    (limit(1000), limit(1000), period())
}

proptest! {
    #[test]
    fn buckets_decide_at_the_top_as_anywhere((capacity, rate, period) in bucket_params(), raw in raw_arrivals(), end in top_end()) {
        if let Ok(alg) = TokenBucket::new(capacity, rate, period) {
            same_at_the_top(&alg, 1, period, capacity, &raw, end, &decide, true);
        }
        if let Ok(alg) = LeakyBucket::new(capacity, rate, period) {
            same_at_the_top(&alg, 1, period, capacity, &raw, end, &decide, true);
        }
        if let Ok(alg) = Pacing::new(capacity, rate, period) {
            same_at_the_top(&alg, 1, period, capacity, &raw, end, &decide, true);
        }
    }

    /// Reservations book up to [`MAX_WAIT`] beyond `MAX_TICKS` without saturating.
    #[test]
    fn reservations_at_the_top_as_anywhere((capacity, rate, period) in small_bucket(), raw in raw_arrivals(), end in top_end(), wait in max_wait()) {
        let reserve = move |alg: &TokenBucket, s, now, cost| alg.reserve(s, now, cost, wait);
        if let Ok(alg) = TokenBucket::new(capacity, rate, period) {
            same_at_the_top(&alg, 1, period, capacity, &raw, end, &reserve, false);
        }
        let reserve = move |alg: &LeakyBucket, s, now, cost| alg.reserve(s, now, cost, wait);
        if let Ok(alg) = LeakyBucket::new(capacity, rate, period) {
            same_at_the_top(&alg, 1, period, capacity, &raw, end, &reserve, false);
        }
        let reserve = move |alg: &Pacing, s, now, cost| alg.reserve(s, now, cost, wait);
        if let Ok(alg) = Pacing::new(capacity, rate, period) {
            same_at_the_top(&alg, 1, period, capacity, &raw, end, &reserve, false);
        }
    }

    #[test]
    fn windows_decide_at_the_top_as_anywhere(limit in limit(1000), period in period(), raw in raw_arrivals(), end in top_end()) {
        let alg = FixedWindow::new(limit, period).unwrap();
        same_at_the_top(&alg, period, period, limit, &raw, end, &decide, true);
        same_at_the_top(&alg.counting_denied(), period, period, limit, &raw, end, &decide, true);
        let alg = SlidingCounter::new(limit, period).unwrap();
        same_at_the_top(&alg, period, period, limit, &raw, end, &decide, true);
        let alg = SlidingLog::new(limit.min(MAX_LOG_LIMIT), period).unwrap();
        same_at_the_top(&alg, 1, period, limit, &raw, end, &decide, true);
    }

    /// The fixed window and the log against their definitions (in `common`), at the top.
    #[test]
    fn windows_match_definitions_at_the_top(limit in prop_oneof![1..=4u64, 1..=100u64], period in period(), raw in raw_arrivals(), end in top_end()) {
        let top = at_the_top(&arrivals(&raw, period, limit), 1, period, end);
        let fixed = run(&FixedWindow::new(limit, period).unwrap(), 10 * period, &top);
        prop_assert_eq!(outcomes(&fixed), window_reference(limit, &top, |now, t| t / period == now / period));
        let log = run(&SlidingLog::new(limit, period).unwrap(), 10 * period, &top);
        prop_assert_eq!(outcomes(&log), window_reference(limit, &top, |now, t| t + period > now));
    }

    /// A ban around a window, its own window a multiple of the inner one's.
    #[test]
    fn bans_decide_at_the_top_as_anywhere(limit in 1..10u64, period in 1..1000u64, threshold in 0..5u64, windows in 1..4u64, duration in 1..5000u64, raw in raw_arrivals(), end in top_end()) {
        let alg = Ban::new(FixedWindow::new(limit, period).unwrap(), threshold, windows * period, duration).unwrap();
        same_at_the_top(&alg, windows * period, period, limit, &raw, end, &decide, true);
        let alg = Ban::new(TokenBucket::new(limit, 1, period).unwrap(), threshold, windows * period, duration).unwrap();
        same_at_the_top(&alg, windows * period, period, limit, &raw, end, &decide, true);
    }

    #[test]
    fn composites_decide_at_the_top_as_anywhere(members in prop::collection::vec(small_bucket(), 1..4), raw in raw_arrivals(), end in top_end(), wait in max_wait()) {
        let Ok(buckets) = members.iter().map(|&(c, r, p)| LeakyBucket::new(c, r, p)).collect::<Result<Vec<_>, _>>() else {
            return Ok(());
        };
        let alg = Composite::new(buckets).unwrap();
        let period = members.iter().map(|m| m.2).max().unwrap();
        same_at_the_top(&alg, 1, period, members[0].0, &raw, end, &decide, true);
        let reserve = move |alg: &Composite<LeakyBucket>, s, now, cost| alg.reserve(s, now, cost, wait);
        same_at_the_top(&alg, 1, period, members[0].0, &raw, end, &reserve, false);
    }
}

/// Issue 16's reproduction: a bucket of one unit checked twice at the last instants
/// admits once.
#[test]
fn one_unit_is_admitted_once_at_the_top() {
    for now in [MAX_TICKS - 1, MAX_TICKS] {
        for (rate, period) in [(1, SECOND), (5, SECOND), (1_000_000_000, 1)] {
            let token = TokenBucket::new(1, rate, period).unwrap();
            let leaky = LeakyBucket::new(1, rate, period).unwrap();
            let pacing = Pacing::new(0, rate, period).unwrap();
            let (first, state) = token.decide(None, now, 1);
            assert!(first.allowed);
            assert!(
                !token.decide(state, now, 1).0.allowed,
                "token bucket at {now}"
            );
            let (first, state) = leaky.decide(None, now, 1);
            assert!(first.allowed);
            assert!(
                !leaky.decide(state, now, 1).0.allowed,
                "leaky bucket at {now}"
            );
            let (first, state) = pacing.decide(None, now, 1);
            assert!(first.allowed);
            assert!(!pacing.decide(state, now, 1).0.allowed, "pacing at {now}");
        }
    }
}

#[test]
fn token_bucket_is_exact_two_seconds_before_the_top() {
    let bucket = TokenBucket::new(10, 5, SECOND).unwrap();
    let (d, state) = bucket.decide(None, 4_611_686_018_427_387_800, 1);
    assert!(d.allowed);
    assert_eq!(d.remaining, 9);
    assert_eq!(d.reset_after, 200_000);
    let d = bucket.peek(state, MAX_TICKS, 10);
    assert_eq!((d.allowed, d.retry_after), (false, Some(199_896)));
}

/// A `now` beyond the range is decided as at `MAX_TICKS`, and [`check_now`] refuses it.
#[test]
fn later_times_are_decided_as_at_the_top_and_refused_by_the_check() {
    let bucket = TokenBucket::new(3, 1, SECOND).unwrap();
    let (_, state) = bucket.decide(None, MAX_TICKS - SECOND / 2, 3);
    for late in [MAX_TICKS + 1, Ticks::MAX] {
        assert_eq!(
            bucket.decide(state, late, 1),
            bucket.decide(state, MAX_TICKS, 1)
        );
        assert_eq!(
            check_now(late),
            Err(ParamError::OutOfRange {
                name: "now",
                value: late,
                min: 0,
                max: MAX_TICKS
            })
        );
    }
    assert_eq!(check_now(MAX_TICKS), Ok(MAX_TICKS));
    assert_eq!(check_now(0), Ok(0));
    assert_eq!(
        check_now(Ticks::MAX).unwrap_err().to_string(),
        "now must be between 0 and 4611686018427387904, got 18446744073709551615"
    );
}

/// The decoders accept exactly the states the core can write: up to `MAX_TICKS` plus the
/// horizon, plus [`MAX_WAIT`] where a reservation may book beyond the horizon.
#[test]
fn bucket_decoders_accept_the_latest_state_and_nothing_later() {
    fn bytes(tag: u8, ticks: u64, frac: u64) -> Vec<u8> {
        [
            vec![1, tag],
            ticks.to_be_bytes().to_vec(),
            frac.to_be_bytes().to_vec(),
        ]
        .concat()
    }
    let (capacity, rate, period) = (10, 3, SECOND);
    let horizon = capacity * period / rate;
    let horizon_frac = capacity * period % rate;
    let token = TokenBucket::new(capacity, rate, period).unwrap();
    let latest = MAX_TICKS + horizon + MAX_WAIT;
    assert!(token.decode(&bytes(4, latest, horizon_frac)).is_ok());
    assert!(token.decode(&bytes(4, latest, horizon_frac + 1)).is_err());
    assert!(token.decode(&bytes(4, latest + 1, 0)).is_err());
    let leaky = LeakyBucket::new(capacity, rate, period).unwrap();
    assert!(leaky.decode(&bytes(5, latest, horizon_frac)).is_ok());
    assert!(leaky.decode(&bytes(5, latest + 1, 0)).is_err());
    // A pacing queue of capacity C holds C + 1 and books only within its horizon.
    let pacing = Pacing::new(capacity - 1, rate, period).unwrap();
    let latest = MAX_TICKS + horizon;
    assert!(pacing.decode(&bytes(6, latest, horizon_frac)).is_ok());
    assert!(pacing.decode(&bytes(6, latest, horizon_frac + 1)).is_err());
    assert!(pacing.decode(&bytes(6, latest + MAX_WAIT, 0)).is_err());
}

/// Reserving for ever at the top books up to [`MAX_WAIT`] ahead and then denies; every
/// state written on the way decodes.
#[test]
fn reservations_book_up_to_the_longest_wait_at_the_top() {
    let period = limits::MAX_PERIOD;
    let bucket = TokenBucket::new(1, 1, period).unwrap();
    let mut state = None;
    let mut booked = 0;
    loop {
        let (d, next) = bucket.reserve(state, MAX_TICKS, 1, Ticks::MAX);
        if !d.allowed {
            assert_eq!(d.retry_after, Some(booked * period - MAX_WAIT));
            break;
        }
        assert_eq!(d.delay, booked * period);
        let next = next.unwrap();
        assert_eq!(bucket.decode(&bucket.encode_to_vec(&next)), Ok(next));
        state = Some(next);
        booked += 1;
    }
    assert_eq!(booked, MAX_WAIT / period + 1);
}
