//! Calendar windows, at explicit times and at the server's.

use super::*;

/// Calendar periods: consecutive, from a start, of random lengths (a few ticks to 366
/// days); the host's calendar as far as the transitions see it.
#[derive(Debug, Clone)]
struct Periods {
    start: Ticks,
    lengths: Vec<Ticks>,
}

impl Periods {
    /// The period holding `now`, or the nearest (the first before the start, the last
    /// after the end: a host's period gone stale, which the core clamps `now` into).
    fn at(&self, now: Ticks) -> CalendarPeriod {
        let mut start = self.start;
        for (i, &length) in self.lengths.iter().enumerate() {
            if now < start + length || i + 1 == self.lengths.len() {
                return CalendarPeriod::new(start, start + length).expect("a period");
            }
            start += length;
        }
        unreachable!("at least one period")
    }
}

#[test]
fn calendar_window() {
    let lengths = prop::collection::vec(
        prop_oneof![
            1..=10u64,
            1..=SECOND * 3600,
            SECOND * 3600 * 23..=MAX_PERIOD
        ],
        1..8,
    );
    let params = (
        limit(),
        lengths,
        // In 2026, or periods crossing 2^52, or ending by the core's last instant.
        prop_oneof![
            Just(EPOCH),
            Just(MAX_LUA_TICKS / 2),
            Just(MAX_LUA_TICKS - SECOND * 3600),
            Just(MAX_TICKS - 8 * MAX_PERIOD)
        ],
    )
        .prop_flat_map(|(l, lengths, start)| {
            (Just(l), overdraft(l), Just(Periods { start, lengths }))
        });
    cases(
        with_reports(params, |(l, _, periods)| (periods.lengths[0], *l)),
        |server, ((limit, over, periods), mut steps)| {
            steps.start = periods.start;
            let window = CalendarWindow::new(limit)
                .unwrap()
                .with_overdraft(over)
                .unwrap();
            let at = |now: Ticks| -> CalendarWindowAt { window.during(periods.at(now)) };
            differential_at(server, &at, &steps, reporting())
        },
    );
}

/// At the server's time a calendar window decides and reports in the period holding
/// it, its key living until the period's end; outside it every route refuses with the
/// server's time, changing nothing.
#[test]
fn calendar_window_at_the_server_time() {
    let server = Server::start_with_module(false);
    let mut con = server.connection();
    let (seconds, micros): (u64, u64) = redis::cmd("TIME").query(&mut con).unwrap();
    let now = seconds * SECOND + micros;
    let window = CalendarWindow::new(10).unwrap().with_overdraft(5).unwrap();
    let day = 86_400 * SECOND;
    let today = window.during(CalendarPeriod::new(now - SECOND, now + day).unwrap());
    let yesterday = window.during(CalendarPeriod::new(now - day, now - SECOND).unwrap());
    for route in [Route::Module, Route::Functions, Route::Scripts] {
        let limiter = |alg| {
            RedisLimiter::new(alg)
                .unwrap()
                .with_prefix(prefix())
                .with_route(route)
                .unwrap()
        };
        let current = limiter(today);
        let decision = current.check(&mut con, b"k", 4).unwrap();
        assert!(
            decision.allowed && decision.remaining == 6,
            "{route:?}: {decision:?}"
        );
        let reported = current
            .report(&mut con, &ReportRequest::new(b"k").adjust(20))
            .unwrap();
        assert_eq!((reported.recorded, reported.dropped), (11, 9), "{route:?}");
        assert!(!reported.decision.allowed, "{route:?}");
        let key = current.redis_keys(b"k").unwrap().remove(0);
        let pttl: u64 = redis::cmd("PTTL").arg(&key).query(&mut con).unwrap();
        assert!(pttl > (day - 60 * SECOND) / 1000, "{route:?}: PTTL {pttl}");
        let stale = limiter(yesterday);
        for got in [
            stale.check(&mut con, b"k", 1).map(|_| ()),
            stale
                .report(&mut con, &ReportRequest::new(b"k").adjust(-1))
                .map(|_| ()),
        ] {
            match got {
                Err(Error::OutOfPeriod { now: at }) => assert!(at >= now, "{route:?}"),
                other => panic!("{route:?}: {other:?}"),
            }
        }
    }
}
