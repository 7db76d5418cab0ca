//! `AnyAlgorithm::new` builds each kind as its own constructor does, and the kind's
//! capabilities are the algorithm's.

use std::sync::Arc;

use sluicegate_core::calendar::{CalendarPeriod, CalendarPeriods, CalendarWindow};
use sluicegate_core::{
    Algorithm, AnyAlgorithm, Ban, Composite, Field, FixedWindow, Kind, LeakyBucket, Pacing,
    ParamError, Params, SlidingCounter, SlidingLog, Ticks, TokenBucket, SECOND,
};

/// Days of a fixed length from the epoch: a calendar without a time-zone database.
#[derive(Debug)]
struct Days;

impl CalendarPeriods for Days {
    fn period_at(&self, now: Ticks) -> CalendarPeriod {
        let day = 86_400 * SECOND;
        let start = now - now % day;
        CalendarPeriod::new(start, start + day).unwrap()
    }

    fn name(&self) -> String {
        "days".into()
    }
}

fn window() -> Params {
    Params::new().limit(5).period(SECOND)
}

fn bucket() -> Params {
    Params::new().capacity(5).rate(2).period(SECOND)
}

#[test]
fn each_kind_builds_as_its_constructor() {
    let cases: [(Kind, Params, AnyAlgorithm); 7] = [
        (
            Kind::FixedWindow,
            window().overdraft(2),
            FixedWindow::new(5, SECOND)
                .and_then(|w| w.with_overdraft(2))
                .unwrap()
                .into(),
        ),
        (
            Kind::FixedWindow,
            window().count_denied(true),
            FixedWindow::new(5, SECOND)
                .unwrap()
                .counting_denied()
                .into(),
        ),
        (
            Kind::SlidingLog,
            window(),
            SlidingLog::new(5, SECOND).unwrap().into(),
        ),
        (
            Kind::SlidingCounter,
            window().overdraft(1),
            SlidingCounter::new(5, SECOND)
                .and_then(|c| c.with_overdraft(1))
                .unwrap()
                .into(),
        ),
        (
            Kind::TokenBucket,
            bucket().overdraft(3),
            TokenBucket::new(5, 2, SECOND)
                .and_then(|b| b.with_overdraft(3))
                .unwrap()
                .into(),
        ),
        (
            Kind::LeakyBucket,
            bucket(),
            LeakyBucket::new(5, 2, SECOND).unwrap().into(),
        ),
        (
            Kind::Pacing,
            bucket(),
            Pacing::new(5, 2, SECOND).unwrap().into(),
        ),
    ];
    for (kind, params, expected) in cases {
        let built = AnyAlgorithm::new(kind, params).unwrap();
        assert_eq!(built, expected, "{kind}");
        assert_eq!(built.kind(), kind);
    }

    let members = vec![
        AnyAlgorithm::new(Kind::FixedWindow, window()).unwrap(),
        AnyAlgorithm::new(Kind::TokenBucket, bucket()).unwrap(),
    ];
    let composite = AnyAlgorithm::new(Kind::Composite, Params::new().members(members.clone()));
    assert_eq!(composite, Ok(Composite::new(members).unwrap().into()));

    let days = Params::new().limit(3).calendar(Arc::new(Days));
    let calendar = AnyAlgorithm::new(Kind::CalendarWindow, days).unwrap();
    assert_eq!(calendar.kind(), Kind::CalendarWindow);
    let expected = CalendarWindow::new(3).unwrap().during(Days.period_at(0));
    assert_eq!(calendar.peek(None, 0, 3), expected.peek(None, 0, 3));
}

#[test]
fn parameters_a_kind_does_not_take_are_refused() {
    let not_taken = |kind, name| Err(ParamError::NotTaken { kind, name });
    let cases = [
        (
            Kind::Pacing,
            bucket().overdraft(1),
            not_taken(Kind::Pacing, "overdraft"),
        ),
        (
            Kind::TokenBucket,
            bucket().count_denied(true),
            not_taken(Kind::TokenBucket, "count_denied"),
        ),
        (
            Kind::FixedWindow,
            window().calendar(Arc::new(Days)),
            not_taken(Kind::FixedWindow, "calendar"),
        ),
        (
            Kind::Composite,
            Params::new().overdraft(1),
            not_taken(Kind::Composite, "overdraft"),
        ),
        (
            Kind::CalendarWindow,
            Params::new().limit(1),
            Err(ParamError::Missing {
                kind: Kind::CalendarWindow,
                name: "calendar",
            }),
        ),
        (
            Kind::Concurrency,
            Params::new().limit(1),
            Err(ParamError::NotRate(Kind::Concurrency)),
        ),
        (
            Kind::Composite,
            Params::new(),
            Err(ParamError::EmptyComposite),
        ),
        (
            Kind::TokenBucket,
            bucket().capacity(0),
            TokenBucket::new(0, 2, SECOND).map(AnyAlgorithm::from),
        ),
    ];
    for (kind, params, expected) in cases {
        assert_eq!(AnyAlgorithm::new(kind, params), expected, "{kind}");
    }
    assert_eq!(
        ParamError::NotTaken {
            kind: Kind::Pacing,
            name: "overdraft"
        }
        .to_string(),
        "pacing takes no overdraft"
    );
}

/// Each kind's capabilities, asked of the kind, are what its algorithm does: a bucket
/// books ahead and takes reports, pacing books but takes none, windows the reverse.
#[test]
fn capabilities_are_the_kinds() {
    for kind in Kind::ALL.into_iter().filter(|kind| kind.is_periodic()) {
        let params = if kind.fields().contains(&Field::Capacity) {
            bucket()
        } else {
            window()
        };
        let algorithm = AnyAlgorithm::new(kind, params).unwrap();
        assert_eq!(algorithm.can_reserve(), kind.can_reserve(), "{kind}");
        assert_eq!(algorithm.can_report(), kind.takes_reports(), "{kind}");
        // A ban decides at `now` and takes no reports, whatever it wraps.
        let banned = AnyAlgorithm::from(Ban::new(algorithm, 1, SECOND, SECOND).unwrap());
        assert!(!banned.can_reserve() && !banned.can_report());
    }
    let reserving: Vec<Kind> = Kind::ALL.into_iter().filter(|k| k.can_reserve()).collect();
    assert_eq!(
        reserving,
        [
            Kind::TokenBucket,
            Kind::LeakyBucket,
            Kind::Pacing,
            Kind::Composite
        ]
    );
    let overdrawn: Vec<Kind> = Kind::ALL
        .into_iter()
        .filter(|k| k.takes_overdraft())
        .collect();
    assert_eq!(
        overdrawn,
        [
            Kind::FixedWindow,
            Kind::SlidingLog,
            Kind::SlidingCounter,
            Kind::TokenBucket,
            Kind::LeakyBucket,
            Kind::CalendarWindow
        ]
    );
    assert!(!Kind::Concurrency.takes_reports() && !Kind::Concurrency.can_reserve());
    assert_eq!(Kind::TokenBucket.fields(), ["capacity", "rate", "period"]);
}
