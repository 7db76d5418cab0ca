//! Reports through the in-process limiters: the same decisions, reports and states as
//! the pure transitions, on the buckets' words, the windows' atomic cells and the locked
//! states alike; and the host contract's `Reporter` on byte keys.

use crate::common::*;
use proptest::prelude::*;
use sluicegate_core::memory::{DirectLimiter, InMemory, KeyedLimiter};
use sluicegate_core::{
    AnyAlgorithm, Clock, FixedWindow, ManualClock, Report, ReportRequest, Reporter, SlidingLog,
    Ticks, TokenBucket,
};

/// Drives a direct and a keyed limiter and the pure transitions through the same steps:
/// decisions (`adjustment` None) and reports.
fn hosts_match<A>(alg: &A, steps: &[(Ticks, u64, Option<i64>)])
where
    A: InMemory + Report + Clone,
    A::State: Send + Sync,
{
    let start = steps[0].0;
    let direct = DirectLimiter::with_clock(alg.clone(), ManualClock::new(start));
    let keyed = KeyedLimiter::with_clock(alg.clone(), 16, ManualClock::new(start));
    let mut state = None;
    for (i, &(now, cost, adjustment)) in steps.iter().enumerate() {
        direct.clock().set(now);
        keyed.clock().set(now);
        match adjustment {
            None => {
                let (want, next) = alg.decide(state.clone(), now, cost);
                state = next;
                assert_eq!(direct.check(cost), want, "step {i}");
                assert_eq!(keyed.check("k", cost), want, "step {i}");
            }
            Some(adjustment) => {
                let (want, next) = alg.report(state.clone(), now, adjustment);
                state = next;
                assert_eq!(direct.report(adjustment), want, "step {i}");
                assert_eq!(keyed.report("k", adjustment), want, "step {i}");
            }
        }
        assert_eq!(direct.state(), state, "step {i}");
        assert_eq!(
            keyed.peek("k", 0),
            alg.peek(state.clone(), now, 0),
            "step {i}"
        );
    }
}

fn steps(
    raw: &[RawArrival],
    ops: &[u8],
    period: Ticks,
    limit: u64,
) -> Vec<(Ticks, u64, Option<i64>)> {
    arrivals(raw, period, limit)
        .into_iter()
        .zip(ops.iter().cycle())
        .map(|((now, cost), op)| {
            let units = i64::try_from(cost).unwrap() * 2;
            let adjustment = [None, Some(units), Some(-units)][usize::from(op % 3)];
            (now, cost, adjustment)
        })
        .collect()
}

proptest! {
    #[test]
    fn memory_hosts_report_as_the_transitions(
        limit in limit(1000), rate in limit(1000), period in 1..=1_000_000u64,
        od in prop_oneof![Just(0), 0..=2000u64], raw in raw_arrivals(),
        ops in prop::collection::vec(any::<u8>(), 1..8),
    ) {
        let steps = steps(&raw, &ops, period, limit);
        let bucket = TokenBucket::new(limit, rate, period).unwrap().with_overdraft(od).unwrap();
        hosts_match(&bucket, &steps);
        hosts_match(&FixedWindow::new(limit, period).unwrap().with_overdraft(od).unwrap(), &steps);
        let log = SlidingLog::new(limit, period).unwrap().with_overdraft(od).unwrap();
        hosts_match(&log, &steps);
        hosts_match(&AnyAlgorithm::from(bucket), &steps);
    }
}

/// The contract on byte keys: a report at the request's time, debt that delays the next
/// admission exactly, a refund, and a time beyond the range refused.
#[test]
fn the_reporter_contract_on_byte_keys() {
    let bucket = TokenBucket::new(10, 1, 1_000)
        .unwrap()
        .with_overdraft(5)
        .unwrap();
    let limiter: KeyedLimiter<Vec<u8>, _, _> =
        KeyedLimiter::with_clock(bucket, 100, ManualClock::new(0));
    assert!(limiter.check(b"k".as_slice(), 10).allowed);
    // 8 more than estimated: 5 recorded (the overdraft), 3 dropped.
    let reported = Reporter::report(&limiter, &ReportRequest::new("k").adjust(8).at(0)).unwrap();
    assert_eq!((reported.recorded, reported.dropped), (5, 3));
    assert!(!reported.decision.allowed);
    assert_eq!(reported.decision.retry_after, Some(5_000));
    // The next unit is admitted once the debt and that unit have refilled.
    assert!(!limiter.check(b"k".as_slice(), 1).allowed);
    limiter.clock().set(5_999);
    assert!(!limiter.check(b"k".as_slice(), 1).allowed);
    limiter.clock().set(6_000);
    assert!(limiter.check(b"k".as_slice(), 1).allowed);
    // A refund returns units, never above capacity.
    let refund = Reporter::report(&limiter, &ReportRequest::new("k").adjust(-100)).unwrap();
    assert_eq!((refund.recorded, refund.dropped), (10, 90));
    assert_eq!(refund.decision.remaining, 10);
    assert!(Reporter::report(&limiter, &ReportRequest::new("k").at(u64::MAX)).is_err());
    assert_eq!(limiter.clock().now(), 6_000);
}

/// A new key that a full limiter refuses records nothing.
#[test]
fn a_refused_new_key_records_nothing() {
    let window = FixedWindow::new(1, 1_000)
        .unwrap()
        .with_overdraft(3)
        .unwrap();
    let limiter = KeyedLimiter::with_clock(window, 1, ManualClock::new(0));
    assert!(limiter.check("a", 1).allowed);
    let refused = limiter.report("b", 2);
    assert_eq!((refused.recorded, refused.dropped), (0, 2));
    assert_eq!((limiter.len(), limiter.refused()), (1, 1));
    assert_eq!(limiter.peek("b", 0).remaining, 1);
}
