//! `AnyAlgorithm` decides, reserves, peeks and encodes exactly as the algorithm it holds.

use crate::common::*;
use proptest::prelude::*;
use sluicegate_core::limits::{MAX_LIMIT, MAX_LOG_LIMIT};
use sluicegate_core::{
    Algorithm, AnyAlgorithm, AnyState, Ban, Composite, Decision, FixedWindow, Kind, LeakyBucket,
    Pacing, Reserve, SlidingCounter, SlidingLog, Ticks, TokenBucket, SECOND,
};

/// What one step asks: decide, peek, or reserve with a `max_wait`.
#[derive(Debug, Clone, Copy)]
enum Op {
    Decide,
    Peek,
    Reserve(Ticks),
}

fn ops() -> impl Strategy<Value = Vec<(u8, Ticks)>> {
    prop::collection::vec((any::<u8>(), 0..3 * SECOND), 120)
}

/// The arrivals with an operation each.
fn steps(
    raw: &[RawArrival],
    ops: &[(u8, Ticks)],
    period: Ticks,
    limit: u64,
) -> Vec<(Ticks, u64, Op)> {
    arrivals(raw, period, limit)
        .into_iter()
        .zip(ops)
        .map(|((now, cost), &(kind, max_wait))| {
            let op = match kind % 3 {
                0 => Op::Decide,
                1 => Op::Peek,
                _ => Op::Reserve(max_wait),
            };
            (now, cost, op)
        })
        .collect()
}

/// [`same`] for an algorithm that books ahead: a reservation is its `reserve`.
fn same_booking<A: Reserve>(concrete: &A, any: &AnyAlgorithm, steps: &[(Ticks, u64, Op)]) {
    same(
        concrete,
        any,
        |s, now, cost, wait| concrete.reserve(s, now, cost, wait),
        steps,
    );
}

/// [`same`] for an algorithm that decides at `now` only: a reservation is a decision.
fn same_deciding<A: Algorithm>(concrete: &A, any: &AnyAlgorithm, steps: &[(Ticks, u64, Op)]) {
    same(
        concrete,
        any,
        |s, now, cost, _| concrete.decide(s, now, cost),
        steps,
    );
}

/// Runs `concrete` and `any` side by side: the same decisions, the same stored bytes, and
/// the stored bytes decode under `any` to its state. `reserve` is how the concrete
/// algorithm answers a reservation.
fn same<A: Algorithm>(
    concrete: &A,
    any: &AnyAlgorithm,
    reserve: impl Fn(Option<A::State>, Ticks, u64, Ticks) -> (Decision, Option<A::State>),
    steps: &[(Ticks, u64, Op)],
) {
    let (mut state, mut any_state): (Option<A::State>, Option<AnyState>) = (None, None);
    for &(now, cost, op) in steps {
        let ((expected, next), (got, any_next)) = match op {
            Op::Decide => (
                concrete.decide(state.clone(), now, cost),
                any.decide(any_state.clone(), now, cost),
            ),
            Op::Peek => {
                let got = any.peek(any_state.clone(), now, cost);
                (
                    (concrete.peek(state.clone(), now, cost), state.clone()),
                    (got, any_state.clone()),
                )
            }
            Op::Reserve(max_wait) => (
                reserve(state.clone(), now, cost, max_wait),
                any.reserve(any_state.clone(), now, cost, max_wait),
            ),
        };
        assert_eq!(got, expected, "{op:?} at {now} of {cost}");
        let bytes = next.as_ref().map(|s| concrete.encode_to_vec(s));
        let any_bytes = any_next.as_ref().map(|s| any.encode_to_vec(s));
        assert_eq!(any_bytes, bytes, "{op:?} at {now} of {cost}");
        if let (Some(bytes), Some(s)) = (&any_bytes, &any_next) {
            assert_eq!(any.decode(bytes).as_ref(), Ok(s));
        }
        (state, any_state) = (next, any_next);
    }
}

fn window_limit() -> impl Strategy<Value = u64> {
    limit(MAX_LIMIT)
}

proptest! {
    #[test]
    fn fixed_window(limit in window_limit(), period in period(), counting in any::<bool>(), raw in raw_arrivals(), ops in ops()) {
        let mut alg = FixedWindow::new(limit, period).unwrap();
        if counting {
            alg = alg.counting_denied();
        }
        same_deciding(&alg, &alg.into(), &steps(&raw, &ops, period, limit));
    }

    #[test]
    fn sliding_log(limit in 1..=MAX_LOG_LIMIT.min(200), period in period(), raw in raw_arrivals(), ops in ops()) {
        let alg = SlidingLog::new(limit, period).unwrap();
        same_deciding(&alg, &alg.into(), &steps(&raw, &ops, period, limit));
    }

    #[test]
    fn sliding_counter(limit in window_limit(), period in period(), raw in raw_arrivals(), ops in ops()) {
        let alg = SlidingCounter::new(limit, period).unwrap();
        same_deciding(&alg, &alg.into(), &steps(&raw, &ops, period, limit));
    }

    #[test]
    fn buckets((capacity, rate, period) in bucket_params(), raw in raw_arrivals(), ops in ops()) {
        let steps = steps(&raw, &ops, period, capacity);
        if let Ok(alg) = TokenBucket::new(capacity, rate, period) {
            same_booking(&alg, &alg.into(), &steps);
        }
        if let Ok(alg) = LeakyBucket::new(capacity, rate, period) {
            same_booking(&alg, &alg.into(), &steps);
        }
        if let Ok(alg) = Pacing::new(capacity, rate, period) {
            same_booking(&alg, &alg.into(), &steps);
        }
    }

    /// A composite of buckets books ahead as the concrete composite does, and stores
    /// the same bytes.
    #[test]
    fn composite(a in 1..50u64, b in 1..50u64, period in 1..10_000u64, raw in raw_arrivals(), ops in ops()) {
        let members = [TokenBucket::new(a, a, period).unwrap(), TokenBucket::new(b, 1, period).unwrap()];
        let concrete = Composite::new(members.to_vec()).unwrap();
        let any = AnyAlgorithm::from(Composite::new(members.map(AnyAlgorithm::from).to_vec()).unwrap());
        same_booking(&concrete, &any, &steps(&raw, &ops, period, a.max(b)));
    }

    /// A ban around a window and around a composite of windows.
    #[test]
    fn ban(limit in 1..10u64, period in 1..1000u64, threshold in 0..10u64, window in 1..3000u64, duration in 1..5000u64, raw in raw_arrivals(), ops in ops()) {
        let steps = steps(&raw, &ops, period, limit);
        let inner = FixedWindow::new(limit, period).unwrap();
        let concrete = Ban::new(inner, threshold, window, duration).unwrap();
        let any = AnyAlgorithm::from(Ban::new(AnyAlgorithm::from(inner), threshold, window, duration).unwrap());
        same_deciding(&concrete, &any, &steps);

        let members = [inner, FixedWindow::new(limit + 1, 2 * period).unwrap()];
        let concrete = Ban::new(Composite::new(members.to_vec()).unwrap(), threshold, window, duration).unwrap();
        let composite = Composite::new(members.map(AnyAlgorithm::from).to_vec()).unwrap();
        let any = AnyAlgorithm::from(Ban::new(AnyAlgorithm::from(composite), threshold, window, duration).unwrap());
        same_deciding(&concrete, &any, &steps);
    }
}

#[test]
fn reserves_only_where_it_books_ahead() {
    let bucket = AnyAlgorithm::from(TokenBucket::new(1, 1, SECOND).unwrap());
    let window = AnyAlgorithm::from(FixedWindow::new(1, SECOND).unwrap());
    assert!(bucket.can_reserve());
    assert!(!window.can_reserve());
    let both = Composite::new(vec![bucket.clone(), window.clone()]).unwrap();
    assert!(!AnyAlgorithm::from(both).can_reserve());
    let buckets = Composite::new(vec![bucket.clone(), bucket.clone()]).unwrap();
    assert!(AnyAlgorithm::from(buckets).can_reserve());
    let banned = AnyAlgorithm::from(Ban::new(bucket.clone(), 1, SECOND, SECOND).unwrap());
    assert!(!banned.can_reserve());

    // The second request books the next token a second ahead; the window cannot.
    let (_, state) = bucket.reserve(None, 0, 1, SECOND);
    let (booked, _) = bucket.reserve(state, 0, 1, SECOND);
    assert!(booked.allowed);
    assert_eq!(booked.delay, SECOND);
    let (_, state) = window.reserve(None, 0, 1, SECOND);
    assert!(!window.reserve(state, 0, 1, SECOND).0.allowed);
}

#[test]
fn kinds() {
    let bucket = AnyAlgorithm::from(TokenBucket::new(1, 1, SECOND).unwrap());
    assert_eq!(bucket.kind(), Kind::TokenBucket);
    let banned = AnyAlgorithm::from(Ban::new(bucket.clone(), 1, SECOND, SECOND).unwrap());
    assert_eq!(banned.kind(), Kind::TokenBucket);
    let composite = AnyAlgorithm::from(Composite::new(vec![bucket]).unwrap());
    assert_eq!(composite.kind(), Kind::Composite);

    for kind in Kind::ALL {
        assert_eq!(Kind::from_name(kind.name()), Some(kind));
        assert_eq!(Kind::from_name(&kind.name().replace('-', "_")), Some(kind));
        assert_eq!(kind.to_string(), kind.name());
        assert!(!kind.fields().is_empty());
    }
    assert_eq!(Kind::from_name("leaky-pacing"), Some(Kind::Pacing));
    assert_eq!(Kind::from_name("fixed_window"), Some(Kind::FixedWindow));
    assert_eq!(Kind::from_name("fixed-windows"), None);
    assert_eq!(Kind::from_name("fixed_window_"), None);
    assert_eq!(Kind::from_name(""), None);
    assert_eq!(Kind::Pacing.fields(), ["capacity", "rate", "period"]);
    assert_eq!(Kind::Concurrency.fields(), ["limit", "lease"]);
}

/// A state of another variant (which no host can produce) is decided as fresh and
/// encodes as nothing, which decodes as an error.
#[test]
fn a_state_of_another_variant_is_fresh() {
    let bucket = AnyAlgorithm::from(TokenBucket::new(2, 1, SECOND).unwrap());
    let window = AnyAlgorithm::from(FixedWindow::new(2, SECOND).unwrap());
    let (_, window_state) = window.decide(None, 0, 2);
    let window_state = window_state.unwrap();
    let (decision, _) = bucket.decide(Some(window_state.clone()), 0, 1);
    assert_eq!(decision, bucket.decide(None, 0, 1).0);
    let bytes = bucket.encode_to_vec(&window_state);
    assert!(bytes.is_empty());
    assert!(bucket.decode(&bytes).is_err());
}
