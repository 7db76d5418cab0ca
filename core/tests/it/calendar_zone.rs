//! Calendar periods in IANA zones: exact across daylight-saving changes, month lengths,
//! leap days and ISO weeks crossing a year. Instants are written in UTC and converted
//! here by the civil-from-days formula, independently of the library under test.

use std::sync::Arc;

use sluicegate_core::{
    Algorithm, AnyAlgorithm, Calendar, CalendarError, CalendarLimit, CalendarPeriod,
    CalendarPeriods, CalendarWindow, CalendarZone, Kind, ParamError, Report, Ticks, ZonedCalendar,
};

use Calendar::{Day, Month, Week};

const HOUR: Ticks = 3_600_000_000;
const BERLIN: &str = "Europe/Berlin";
const NEW_YORK: &str = "America/New_York";

/// Microseconds since the epoch of `y-m-d h:00` UTC.
fn utc(y: i64, m: i64, d: i64, h: i64) -> Ticks {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    u64::try_from(days * 24 + h).unwrap() * HOUR
}

fn period(calendar: Calendar, zone: &str, now: Ticks) -> (Ticks, Ticks) {
    let p = calendar
        .period_at(&CalendarZone::named(zone).unwrap(), now)
        .unwrap();
    (p.start(), p.end())
}

/// Every instant of a period maps to it: its first, its last, and one inside.
fn assert_period(calendar: Calendar, zone: &str, start: Ticks, end: Ticks) {
    for now in [start, start + 1, (start + end) / 2, end - 1] {
        assert_eq!(
            period(calendar, zone, now),
            (start, end),
            "{zone} {calendar:?} at {now}"
        );
    }
    assert_ne!(period(calendar, zone, end).0, start);
}

#[test]
fn days_at_daylight_saving_changes_last_23_and_25_hours() {
    // Berlin: clocks go forward on 29 March 2026 and back on 25 October 2026; New York:
    // forward on 8 March 2026, back on 1 November 2026.
    let berlin = [(28, 3, 23, 29, 3, 22), (24, 10, 22, 25, 10, 23)];
    let new_york = [(8, 3, 5, 9, 3, 4), (1, 11, 4, 2, 11, 5)];
    for (zone, days) in [(BERLIN, berlin), (NEW_YORK, new_york)] {
        for ((d, m, h, next_d, next_m, next_h), hours) in days.into_iter().zip([23, 25]) {
            let (start, end) = (utc(2026, m, d, h), utc(2026, next_m, next_d, next_h));
            assert_eq!(end - start, hours * HOUR, "{zone}");
            assert_period(Day, zone, start, end);
        }
    }
    // The days around them are 24 hours long.
    assert_period(Day, NEW_YORK, utc(2026, 11, 2, 5), utc(2026, 11, 3, 5));
}

#[test]
fn months_have_their_lengths_and_their_zone_offsets() {
    // January in Berlin: midnight is 23:00 UTC the day before.
    assert_period(Month, BERLIN, utc(2025, 12, 31, 23), utc(2026, 1, 31, 23));
    // March 2026 in Berlin loses an hour to summer time.
    let march = (utc(2026, 2, 28, 23), utc(2026, 3, 31, 22));
    assert_eq!(march.1 - march.0, (31 * 24 - 1) * HOUR);
    assert_period(Month, BERLIN, march.0, march.1);
    // February 2027 has 28 days, February 2028 has 29; 29 February 2028 is a day.
    assert_period(Month, "UTC", utc(2027, 2, 1, 0), utc(2027, 3, 1, 0));
    let leap = (utc(2028, 2, 1, 0), utc(2028, 3, 1, 0));
    assert_eq!(leap.1 - leap.0, 29 * 24 * HOUR);
    assert_period(Month, "UTC", leap.0, leap.1);
    assert_period(Day, "UTC", utc(2028, 2, 29, 0), utc(2028, 3, 1, 0));
    // April and December end on their 30th and 31st, in New York.
    assert_period(Month, NEW_YORK, utc(2026, 4, 1, 4), utc(2026, 5, 1, 4));
    assert_period(Month, NEW_YORK, utc(2026, 12, 1, 5), utc(2027, 1, 1, 5));
}

#[test]
fn iso_weeks_start_on_monday_and_cross_years() {
    // Thursday 1 January 2026 is in the week from Monday 29 December 2025.
    assert_period(Week, "UTC", utc(2025, 12, 29, 0), utc(2026, 1, 5, 0));
    // The week of the autumn change in Berlin lasts 7 days and an hour.
    let week = (utc(2026, 10, 18, 22), utc(2026, 10, 25, 23));
    assert_eq!(week.1 - week.0, (7 * 24 + 1) * HOUR);
    assert_period(Week, BERLIN, week.0, week.1);
}

#[test]
fn a_calendar_window_resets_at_the_true_boundary() {
    let zone = CalendarZone::named(BERLIN).unwrap();
    let now = utc(2026, 3, 29, 12);
    let window = CalendarWindow::new(2)
        .unwrap()
        .during(Calendar::Day.period_at(&zone, now).unwrap());
    let (first, state) = window.decide(None, now, 2);
    assert!(first.allowed);
    assert_eq!(first.reset_after, utc(2026, 3, 29, 22) - now);
    let (denied, _) = window.decide(state, now + HOUR, 1);
    assert_eq!(denied.retry_after, Some(utc(2026, 3, 29, 22) - now - HOUR));
    // The next day's period finds the count gone.
    let next = Calendar::Day
        .period_at(&zone, utc(2026, 3, 29, 22))
        .unwrap();
    let (later, _) =
        CalendarWindow::new(2)
            .unwrap()
            .during(next)
            .decide(state, utc(2026, 3, 29, 22), 2);
    assert!(later.allowed);
    assert_eq!(later.reset_after, 24 * HOUR);
}

#[test]
fn bad_zones_and_instants_are_errors() {
    assert_eq!(
        CalendarZone::named("Mars/Olympus_Mons"),
        Err(CalendarError::UnknownZone("Mars/Olympus_Mons".into()))
    );
    let utc = CalendarZone::UTC;
    for now in [u64::MAX, 1 << 62] {
        assert_eq!(
            Calendar::Month.period_at(&utc, now),
            Err(CalendarError::OutOfRange(now))
        );
    }
    // The first period of the epoch starts at tick 0.
    assert_eq!(
        Calendar::Day.period_at(&utc, 0),
        Ok(CalendarPeriod::new(0, 24 * HOUR).unwrap())
    );
}

fn zoned(calendar: Calendar, zone: &str) -> ZonedCalendar {
    ZonedCalendar::new(calendar, CalendarZone::named(zone).unwrap()).unwrap()
}

/// The dynamic algorithm finds each decision's period from its calendar: across New
/// York's 25-hour day it decides and reports as the window during that period.
#[test]
fn the_dynamic_calendar_window_takes_the_period_from_the_clock() {
    let window = CalendarWindow::new(3).unwrap().with_overdraft(2).unwrap();
    let calendar = zoned(Calendar::Day, NEW_YORK);
    let any = AnyAlgorithm::from(CalendarLimit::new(window, Arc::new(calendar.clone())));
    assert_eq!(any.kind(), Kind::CalendarWindow);
    assert!(any.can_report() && !any.can_reserve());
    let (mut state, mut expected) = (None, None);
    for (i, now) in (0..60).map(|i| (i, utc(2026, 10, 31, 20) + i * 3 * HOUR / 2)) {
        let during = window.during(calendar.period_at(now));
        if i % 4 == 3 {
            let (reported, next) = any.report(state.take(), now, 2);
            let (want, want_state) = during.report(expected.take(), now, 2);
            assert_eq!(reported, want, "report at {now}");
            (state, expected) = (next, want_state);
        } else {
            let (decision, next) = any.decide(state.take(), now, 1);
            let (want, want_state) = during.decide(expected.take(), now, 1);
            assert_eq!(decision, want, "decision at {now}");
            (state, expected) = (next, want_state);
        }
        let bytes = state.as_ref().map(|s| any.encode_to_vec(s));
        assert_eq!(bytes, expected.as_ref().map(|s| during.encode_to_vec(s)));
        if let Some(bytes) = bytes {
            assert_eq!(any.decode(&bytes).as_ref(), Ok(state.as_ref().unwrap()));
        }
    }
    // The 25-hour day: reset at New York's midnight of 2 November (05:00 UTC).
    let now = utc(2026, 11, 1, 12);
    let (decision, _) = any.decide(None, now, 1);
    assert_eq!(decision.reset_after, utc(2026, 11, 2, 5) - now);
}

#[test]
fn calendar_limits_compare_by_window_and_calendar_name() {
    let window = CalendarWindow::new(3).unwrap();
    let limit = |calendar, zone| CalendarLimit::new(window, Arc::new(zoned(calendar, zone)));
    assert_eq!(
        limit(Calendar::Month, BERLIN),
        limit(Calendar::Month, BERLIN)
    );
    assert_ne!(
        limit(Calendar::Month, BERLIN),
        limit(Calendar::Month, NEW_YORK)
    );
    assert_ne!(
        limit(Calendar::Month, BERLIN),
        limit(Calendar::Week, BERLIN)
    );
    assert_eq!(
        limit(Calendar::Week, BERLIN).calendar().name(),
        "week in Europe/Berlin"
    );
    let utc_month = ZonedCalendar::new(Calendar::Month, CalendarZone::UTC).unwrap();
    assert_eq!(utc_month.name(), "month in UTC");
    for calendar in Calendar::ALL {
        assert_eq!(Calendar::from_name(calendar.name()), Some(calendar));
    }
    assert_eq!(Calendar::from_name("year"), None);
}

/// Beyond the database's range a calendar has no period: its window refuses, counting
/// nothing, and the host's check is an error naming the time.
#[test]
fn instants_beyond_the_calendar_are_refused() {
    for zone in ["Pacific/Kiritimati", "Etc/GMT+12", BERLIN] {
        let window = CalendarWindow::new(3).unwrap().with_overdraft(2).unwrap();
        let limit = CalendarLimit::new(window, Arc::new(zoned(Calendar::Month, zone)));
        let live = limit.decide(None, utc(9999, 11, 1, 0), 1).1;
        for now in [utc(10_000, 1, 2, 0), 1 << 62] {
            assert!(
                matches!(limit.period_at(now), Err(ParamError::OutOfRange { name: "now", value, .. }) if value == now),
                "{zone}"
            );
            let (decision, state) = limit.decide(live, now, 1);
            assert_eq!(
                (decision.allowed, decision.retry_after, decision.reset_after),
                (false, None, 0),
                "{zone}"
            );
            assert_eq!(state, live, "{zone}");
            assert_eq!(limit.adjust(live, now, 2), (0, live), "{zone}");
        }
    }
}

/// Periods holding the epoch that start before 1970 (a week from Monday 29 December
/// 1969, a day in Tokyo from 15:00 UTC) start at tick 0: a clock starting there (a
/// simulation's) sees them end and the next begin.
#[test]
fn periods_holding_the_epoch_start_at_tick_0_and_end() {
    assert_eq!(period(Week, "UTC", 0), (0, utc(1970, 1, 5, 0)));
    assert_eq!(period(Day, "Asia/Tokyo", 0), (0, 15 * HOUR));
    assert_period(Week, "UTC", utc(1970, 1, 5, 0), utc(1970, 1, 12, 0));
    assert_period(Day, "Asia/Tokyo", 15 * HOUR, 39 * HOUR);
    for (calendar, zone, next) in [
        (Week, "UTC", utc(1970, 1, 5, 0)),
        (Day, "Asia/Tokyo", 15 * HOUR),
    ] {
        let limit = CalendarLimit::new(
            CalendarWindow::new(2).unwrap(),
            Arc::new(zoned(calendar, zone)),
        );
        let (first, state) = limit.decide(None, 0, 2);
        assert_eq!((first.allowed, first.reset_after), (true, next), "{zone}");
        assert!(!limit.decide(state, next - 1, 1).0.allowed, "{zone}");
        assert!(limit.decide(state, next, 2).0.allowed, "{zone}");
    }
}

/// St. John's changed its clocks at 00:01 until 2011: on 7 November 2010 at 00:01 NDT
/// (02:31 UTC) they went back to 23:01 of the 6th. The 7th began at its first midnight
/// (02:30 UTC), so the hour dated the 6th after it belongs to the 7th, which lasts 25
/// hours; the 6th's count is gone there.
#[test]
fn a_day_starts_at_the_first_instant_of_its_date_where_clocks_go_back_across_midnight() {
    const MINUTE: Ticks = HOUR / 60;
    let zone = "America/St_Johns";
    let seventh = (
        utc(2010, 11, 7, 2) + 30 * MINUTE,
        utc(2010, 11, 8, 3) + 30 * MINUTE,
    );
    assert_period(Day, zone, seventh.0, seventh.1);
    let repeated = utc(2010, 11, 7, 2) + 45 * MINUTE;
    assert_eq!(period(Day, zone, repeated), seventh);
    assert_eq!(period(Week, zone, repeated).1, seventh.1);
    assert_eq!(
        period(Month, zone, repeated).0,
        utc(2010, 11, 1, 2) + 30 * MINUTE
    );
    let limit = CalendarLimit::new(CalendarWindow::new(2).unwrap(), Arc::new(zoned(Day, zone)));
    let (_, state) = limit.decide(None, seventh.0 - MINUTE, 2);
    let (decision, _) = limit.decide(state, repeated, 2);
    assert!(decision.allowed, "{decision:?}");
    assert_eq!(decision.reset_after, seventh.1 - repeated);
}

/// A calendar that hands over a period not holding `now` (ended before it) is refused,
/// its count left as it was: never counted as live to the stale end.
#[test]
fn a_calendar_period_not_holding_now_is_refused() {
    #[derive(Debug)]
    struct Stale;
    impl CalendarPeriods for Stale {
        fn period_at(&self, _: Ticks) -> CalendarPeriod {
            CalendarPeriod::new(0, HOUR).unwrap()
        }
        fn name(&self) -> String {
            "stale".into()
        }
    }
    let limit = CalendarLimit::new(CalendarWindow::new(2).unwrap(), Arc::new(Stale));
    let (_, state) = limit.decide(None, HOUR - 1, 1);
    assert!(state.is_some());
    let (decision, after) = limit.decide(state, HOUR, 1);
    assert!(!decision.allowed, "{decision:?}");
    assert_eq!((decision.retry_after, decision.reset_after), (None, 0));
    assert_eq!(after, state);
    assert_eq!(
        limit.period_at(HOUR),
        Err(ParamError::OutOfRange {
            name: "now",
            value: HOUR,
            min: 0,
            max: HOUR - 1
        })
    );
    let period = CalendarPeriod::new(HOUR, 2 * HOUR).unwrap();
    assert_eq!(period.holding(HOUR), Ok(period));
    assert!(period.holding(2 * HOUR).is_err() && period.holding(HOUR - 1).is_err());
}
