//! Reports over sled: the core's exact transition on the stored bytes, one atomic
//! read-modify-write as a decision, on every algorithm that takes reports (the calendar
//! window through the dynamic algorithm, its period from the time of each step).

use std::collections::HashMap;
use std::sync::Arc;

use crate::common::temp_tree;
use proptest::prelude::*;
use sluicegate_core::{
    Algorithm, AnyAlgorithm, Calendar, CalendarLimit, CalendarWindow, CalendarZone, Composite,
    FixedWindow, LeakyBucket, Report, ReportRequest, Reporter, Request, SlidingCounter, SlidingLog,
    Ticks, TokenBucket, ZonedCalendar, SECOND,
};
use sluicegate_sled::{Durability, SledLimiter};

/// Runs `trace` (time, key, adjustment or, when `decide`, cost) through sled and the
/// core side by side: the same answers, and the record holding the core's bytes.
fn same_as_core(alg: &AnyAlgorithm, trace: &[(Ticks, u8, bool, i64)]) {
    let (_dir, _db, tree) = temp_tree("limits");
    let limiter = SledLimiter::new(tree.clone(), alg.clone(), Durability::Background);
    let mut states: HashMap<u8, Option<_>> = HashMap::new();
    for &(now, key, decide, amount) in trace {
        let state = states.remove(&key).flatten();
        let bytes = [key];
        let next = if decide {
            let cost = amount.unsigned_abs();
            let (want, next) = alg.decide(state, now, cost);
            let got = limiter.check_request(&Request::new(&bytes).cost(cost).at(now));
            assert_eq!(got.unwrap(), want, "decide {cost} at {now}");
            next
        } else {
            let (want, next) = alg.report(state, now, amount);
            let request = ReportRequest::new(&bytes).adjust(amount).at(now);
            assert_eq!(
                Reporter::report(&limiter, &request).unwrap(),
                want,
                "report {amount} at {now}"
            );
            next
        };
        let stored = tree.get(bytes).unwrap();
        assert_eq!(
            stored.as_deref(),
            next.as_ref().map(|s| alg.encode_to_vec(s)).as_deref()
        );
        states.insert(key, next);
    }
}

/// Every algorithm that takes reports, with `overdraft`; the calendar window by days in
/// New York.
fn algorithms(limit: u64, overdraft: u64, period: Ticks) -> Vec<AnyAlgorithm> {
    let day = ZonedCalendar::new(
        Calendar::Day,
        CalendarZone::named("America/New_York").unwrap(),
    );
    let calendar = CalendarWindow::new(limit)
        .unwrap()
        .with_overdraft(overdraft)
        .unwrap();
    let window = |l, p| {
        FixedWindow::new(l, p)
            .unwrap()
            .with_overdraft(overdraft)
            .unwrap()
    };
    vec![
        window(limit, period).into(),
        SlidingCounter::new(limit, period)
            .unwrap()
            .with_overdraft(overdraft)
            .unwrap()
            .into(),
        SlidingLog::new(limit, period)
            .unwrap()
            .with_overdraft(overdraft)
            .unwrap()
            .into(),
        TokenBucket::new(limit, 2, period)
            .unwrap()
            .with_overdraft(overdraft)
            .unwrap()
            .into(),
        LeakyBucket::new(limit, 2, period)
            .unwrap()
            .with_overdraft(overdraft)
            .unwrap()
            .into(),
        CalendarLimit::new(calendar, Arc::new(day.unwrap())).into(),
        Composite::new(vec![
            AnyAlgorithm::from(window(limit, period)),
            window(3 * limit, 10 * period).into(),
        ])
        .unwrap()
        .into(),
    ]
}

/// Steps a few hours apart at most, so traces cross New York's days (the first is the
/// 25-hour day of 1 November 2026).
fn trace() -> impl Strategy<Value = Vec<(Ticks, u8, bool, i64)>> {
    let step = (0..4 * 3600 * SECOND, 0..2u8, any::<bool>(), -8..12i64);
    prop::collection::vec(step, 1..50).prop_map(|steps| {
        let mut now = 1_793_505_600 * SECOND;
        steps
            .into_iter()
            .map(|(gap, key, decide, amount)| {
                now += gap / if decide { 1 } else { 4000 };
                (now, key, decide, amount)
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn reports_and_decisions_store_as_the_core(
        limit in 1..10u64,
        overdraft in prop_oneof![Just(0), 1..20u64],
        period in prop_oneof![Just(SECOND), 1..3600 * SECOND],
        trace in trace(),
    ) {
        for alg in algorithms(limit, overdraft, period) {
            same_as_core(&alg, &trace);
        }
    }
}

/// Eight threads reporting on one key record exactly the bound: the read-modify-write
/// loses no report and records none twice.
#[test]
fn concurrent_reports_record_exactly_up_to_the_bound() {
    let (_dir, _db, tree) = temp_tree("limits");
    let window = FixedWindow::new(100, 3600 * SECOND)
        .unwrap()
        .with_overdraft(200)
        .unwrap();
    let limiter = Arc::new(SledLimiter::new(tree, window, Durability::Background));
    let now = 1_700_000_000 * SECOND;
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let limiter = Arc::clone(&limiter);
            std::thread::spawn(move || {
                (0..50)
                    .map(|_| {
                        let request = ReportRequest::new(b"hot").adjust(1).at(now);
                        limiter.report(&request).unwrap().recorded
                    })
                    .sum::<u64>()
            })
        })
        .collect();
    let recorded: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(recorded, 300);
    let denied = limiter
        .check_request(&Request::new(b"hot").cost(0).at(now))
        .unwrap();
    assert!(!denied.allowed);
}
