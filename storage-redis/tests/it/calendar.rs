//! The dynamic calendar window (a policy's: [`AnyAlgorithm::CalendarWindow`], its period
//! from a zoned calendar at each decision) on the module, the function library and
//! `EVALSHA`: at explicit times across a daylight-saving change and a month end its
//! decisions, reports and stored bytes are the core's, one call or a batch; at the
//! server's time it decides in the period holding it, the key expiring at its end; and a
//! period this machine got wrong (its clock and the server's disagreeing near a
//! boundary) is refused by the server and computed again at the server's time.

use std::sync::{Arc, Mutex};

use sluicegate_core::{
    Algorithm, AnyAlgorithm, Calendar, CalendarLimit, CalendarPeriod, CalendarPeriods,
    CalendarWindow, CalendarZone, Decision, Report, ReportRequest, Reported, Request, Ticks,
    ZonedCalendar, SECOND,
};
use sluicegate_redis::{RedisLimiter, Route};

use crate::common::{self, Server};

const ROUTES: [Route; 3] = [Route::Module, Route::Functions, Route::Scripts];
const HOUR: Ticks = 3600 * SECOND;

/// A window of 5 (overdraft 2) in `periods`.
fn window(periods: Arc<dyn CalendarPeriods>) -> AnyAlgorithm {
    let window = CalendarWindow::new(5).unwrap().with_overdraft(2).unwrap();
    CalendarLimit::new(window, periods).into()
}

/// `calendar` in New York.
fn new_york(calendar: Calendar) -> ZonedCalendar {
    ZonedCalendar::new(calendar, CalendarZone::named("America/New_York").unwrap()).unwrap()
}

fn limiter(alg: &AnyAlgorithm, route: Route) -> RedisLimiter<AnyAlgorithm> {
    RedisLimiter::new(alg.clone())
        .unwrap()
        .with_prefix(common::fresh("calendar") + ":")
        .with_route(route)
        .unwrap()
}

/// One step of a trace: checks of these costs at once (one: a single call; more: a
/// batch), or a report of an adjustment.
enum Step {
    Check(&'static [u64]),
    Report(i64),
}

/// What a step got.
#[derive(Debug, PartialEq, Eq)]
enum Answer {
    Decided(Vec<Decision>),
    Reported(Reported),
}

/// Runs `trace` (each step at its time) through the core and through Redis on every
/// route: the same answers, the key holding the core's bytes, with no expiry.
fn same_as_the_core(server: &Server, alg: &AnyAlgorithm, trace: &[(Ticks, Step)]) {
    let mut con = server.connection();
    for route in ROUTES {
        let limiter = limiter(alg, route);
        let key = limiter.redis_keys(b"k").unwrap().remove(0);
        let mut state = None;
        for (now, step) in trace {
            let now = *now;
            let (want, got) = match step {
                Step::Check(costs) => {
                    let want = costs.iter().map(|&cost| {
                        let (decision, next) = alg.decide(state.take(), now, cost);
                        state = next;
                        decision
                    });
                    let want = Answer::Decided(want.collect());
                    let got = if let [cost] = costs {
                        let request = Request::new(b"k").cost(*cost).at(now);
                        vec![limiter.check_request(&mut con, &request).unwrap()]
                    } else {
                        let requests: Vec<_> = costs
                            .iter()
                            .map(|&c| Request::new(b"k").cost(c).at(now))
                            .collect();
                        let got = limiter.check_batch(&mut con, &requests).unwrap();
                        got.into_iter().map(Result::unwrap).collect()
                    };
                    (want, Answer::Decided(got))
                }
                Step::Report(adjust) => {
                    let (reported, next) = alg.report(state.take(), now, *adjust);
                    state = next;
                    let request = ReportRequest::new(b"k").adjust(*adjust).at(now);
                    let got = limiter.report(&mut con, &request).unwrap();
                    (Answer::Reported(reported), Answer::Reported(got))
                }
            };
            assert_eq!(got, want, "{route:?} at {now}");
            let stored: Option<Vec<u8>> = redis::cmd("GET").arg(&key).query(&mut con).unwrap();
            let bytes = state.as_ref().map(|s| alg.encode_to_vec(s));
            assert_eq!(stored, bytes, "{route:?}: bytes at {now}");
            let pttl: i64 = redis::cmd("PTTL").arg(&key).query(&mut con).unwrap();
            assert!(pttl == -1 || pttl == -2, "{route:?}: PTTL {pttl}");
        }
    }
}

/// Steps around a boundary at `turn` (the period before it starts at `before`): the
/// last instants before it, the first after, a step back into the earlier period (its
/// stored count now belongs to the later one), and a batch.
fn around(before: Ticks, turn: Ticks) -> Vec<(Ticks, Step)> {
    vec![
        (before, Step::Check(&[3])),
        (turn - HOUR, Step::Report(2)),
        (turn - 1, Step::Check(&[1, 1, 2])),
        (turn, Step::Check(&[4])),
        (turn + 1, Step::Report(-1)),
        (turn - 2, Step::Check(&[2])),
        (turn + HOUR, Step::Check(&[1, 6, 1])),
        (turn + 2 * HOUR, Step::Report(9)),
    ]
}

#[test]
fn across_a_daylight_saving_change_and_a_month_end() {
    let server = Server::start_with_module(false);
    // 2026-03-08 in New York: 23 hours, its clocks going from 02:00 to 03:00.
    let day = new_york(Calendar::Day);
    let spring = day.period_at(1_773_000_000 * SECOND);
    assert_eq!(spring.end() - spring.start(), 23 * HOUR);
    let alg = window(Arc::new(day));
    same_as_the_core(&server, &alg, &around(spring.start(), spring.end()));
    // The day from 02:00 to 03:00 was skipped: the same day either side of it.
    same_as_the_core(
        &server,
        &alg,
        &around(spring.start(), spring.start() + 3 * HOUR),
    );
    // January 2026 in New York, to February.
    let month = new_york(Calendar::Month);
    let january = month.period_at(1_769_000_000 * SECOND);
    assert_eq!(january.end() - january.start(), 31 * 24 * HOUR);
    let alg = window(Arc::new(month));
    same_as_the_core(&server, &alg, &around(january.start(), january.end()));
}

/// The server's time, in µs.
fn server_now(con: &mut redis::Connection) -> Ticks {
    let (seconds, micros): (u64, u64) = redis::cmd("TIME").query(con).unwrap();
    seconds * SECOND + micros
}

/// Checks `limiter` at the server's time, one call, then (after `between`) a batch:
/// each counted once, the key expiring at `end_of` the server's time.
fn at_the_server_time(
    con: &mut redis::Connection,
    limiter: &RedisLimiter<AnyAlgorithm>,
    between: impl FnOnce(),
    end_of: impl Fn(Ticks) -> Ticks,
) {
    let route = limiter.route();
    let decision = limiter.check(con, b"k", 2).unwrap();
    assert!(
        decision.allowed && decision.remaining == 3,
        "{route:?}: {decision:?}"
    );
    between();
    let batch = limiter
        .check_batch(con, &[Request::new(b"k"), Request::new(b"k").cost(4)])
        .unwrap();
    let allowed: Vec<bool> = batch.into_iter().map(|d| d.unwrap().allowed).collect();
    assert_eq!(allowed, [true, false], "{route:?}");
    let peeked = limiter.peek(con, &Request::new(b"k").cost(0)).unwrap();
    assert_eq!(peeked.remaining, 2, "{route:?}");
    let now = server_now(con);
    let key = limiter.redis_keys(b"k").unwrap().remove(0);
    let pttl: Ticks = redis::cmd("PTTL").arg(&key).query(con).unwrap();
    let expected = (end_of(now) - now) / 1000;
    assert!(
        pttl.abs_diff(expected) < 2000,
        "{route:?}: PTTL {pttl}, {expected}"
    );
}

#[test]
fn at_the_server_time_the_key_expires_at_the_period_end() {
    let server = Server::start_with_module(false);
    let mut con = server.connection();
    let day = Arc::new(new_york(Calendar::Day));
    for route in ROUTES {
        let limiter = limiter(&window(day.clone()), route);
        at_the_server_time(&mut con, &limiter, || {}, |now| day.period_at(now).end());
    }
}

/// Hours, except that the first instant (past 1970) it is asked about gets the hour
/// before: a machine whose clock is behind the server's, across a boundary.
#[derive(Debug, Default)]
struct Behind(Mutex<Option<Ticks>>);

impl CalendarPeriods for Behind {
    fn period_at(&self, now: Ticks) -> CalendarPeriod {
        let mut first = self.0.lock().unwrap();
        if now > HOUR && *first.get_or_insert(now) == now {
            let start = now - now % HOUR - HOUR;
            return CalendarPeriod::new(start, start + HOUR).unwrap();
        }
        let start = now - now % HOUR;
        CalendarPeriod::new(start, start + HOUR).unwrap()
    }

    fn name(&self) -> String {
        "hours, behind at first".into()
    }
}

/// A period the server refuses is computed again at its time: one call and a batch,
/// each counted once, in the server's hour.
#[test]
fn a_period_the_server_refuses_is_taken_at_its_time() {
    let server = Server::start_with_module(false);
    let mut con = server.connection();
    for route in ROUTES {
        let periods = Arc::new(Behind::default());
        let limiter = limiter(&window(periods.clone()), route);
        // The batch's one clock reading gets the stale hour: every call goes again.
        let stale_again = || *periods.0.lock().unwrap() = None;
        at_the_server_time(&mut con, &limiter, stale_again, |now| {
            now - now % HOUR + HOUR
        });
    }
}
