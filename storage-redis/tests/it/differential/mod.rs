//! The scripts and the module against the core, on a real `redis-server` with the module
//! loaded, each trace once through the module's commands, once through the function
//! library and once through `EVALSHA`: random parameters within the
//! Lua range and random traces with explicit `now`; after every step the decisions are
//! identical, every key holds exactly the core's encoding (or is gone when the core's
//! state is fresh) with no expiry (explicit times never expire on the server's clock).
//! Traces start in 2026, in the last periods before 2^52 (where the scripts' instants
//! stop being doubles: [`MAX_LUA_TICKS`], a sliding log's last time) or before the
//! core's [`MAX_TICKS`], and may step past it: such a call is `Error::OutOfRange` and
//! changes nothing. Costs go up to
//! `u64::MAX`. Traces of the reporting algorithms mix in reports and refunds (signed
//! adjustments up to `i64::MIN`) with random overdrafts: their `Reported` values too are
//! the core's.

mod bans;
mod buckets;
mod calendar;
mod composites;
mod reports;
mod seeds;
mod windows;

use proptest::prelude::*;
use sluicegate_core::limits::MAX_PERIOD;
use sluicegate_core::{
    Algorithm, AnyAlgorithm, AnyState, Ban, CalendarPeriod, CalendarWindow, CalendarWindowAt,
    Composite, Decision, FixedWindow, LeakyBucket, Pacing, Report, ReportRequest, Reported,
    Request, Reserve, SlidingCounter, SlidingLog, Ticks, TokenBucket, MAX_TICKS, SECOND,
};
use sluicegate_redis::{
    Error, FastAsk, LuaAlgorithm, RedisLimiter, Route, MAX_LUA_LIMIT, MAX_LUA_LOG_LIMIT,
    MAX_LUA_TICKS,
};

use crate::common::stored::key_values;
use crate::common::strategy::{adjustment, cost, gap, limit, overdraft};
use crate::common::{self, Server};

/// Around 2026 in µs since the Unix epoch.
const EPOCH: Ticks = 1_790_000_000_000_000;

/// Runs 48 random cases of `test` against a server of their own.
fn cases<S: Strategy>(strategy: S, test: impl Fn(&Server, S::Value) -> Result<(), TestCaseError>) {
    common::cases(&Server::start_with_module(false), 48, strategy, test);
}

/// A fresh key prefix per case, so cases never see each other's keys.
fn prefix() -> String {
    common::fresh("case") + ":"
}

/// One request: which of three keys, the gap before it, its cost, and the longest wait
/// for reservations (`None`: a plain check); or, with an adjustment, a report of it.
#[derive(Debug, Clone)]
struct Step {
    key: u8,
    gap: Ticks,
    cost: u64,
    max_wait: Option<Ticks>,
    adjust: Option<i64>,
}

/// Where a trace starts, and its requests.
#[derive(Debug, Clone)]
struct Trace {
    start: Ticks,
    steps: Vec<Step>,
}

/// A trace around `period` and `limit`; with `reports`, a third of its steps reports.
fn steps(period: Ticks, limit: u64, reports: bool) -> impl Strategy<Value = Trace> {
    // In 2026, or within the last few periods before 2^52 (crossing it) or the core's
    // last instant.
    let back = 0..=4 * period.min(MAX_LUA_TICKS / 8);
    let start = prop_oneof![
        2 => Just(EPOCH),
        1 => back.clone().prop_map(|back| MAX_LUA_TICKS - back),
        1 => back.prop_map(|back| MAX_TICKS - back),
    ];
    // Each of `cost`'s five as likely as 2^40 and any at all.
    let cost = prop_oneof![5 => cost(limit), 1 => Just(1 << 40), 1 => any::<u64>()];
    let wait = prop_oneof![
        Just(None),
        Just(Some(0)),
        (0..=2 * period).prop_map(Some),
        Just(Some(u64::MAX))
    ];
    let adjust = if reports {
        prop_oneof![2 => Just(None), 1 => adjustment(limit).prop_map(Some)].boxed()
    } else {
        Just(None).boxed()
    };
    let steps = prop::collection::vec(
        (0..3u8, gap(period), cost, wait, adjust).prop_map(|(key, gap, cost, max_wait, adjust)| {
            Step {
                key,
                gap,
                cost,
                max_wait,
                adjust,
            }
        }),
        1..60,
    );
    (start, steps).prop_map(|(start, steps)| Trace { start, steps })
}

/// A period: short, up to an hour, up to the core's longest (366 days), or within a
/// thousand ticks of it.
fn period() -> impl Strategy<Value = Ticks> {
    prop_oneof![
        1..=10u64,
        1..=10_000u64,
        1..=SECOND * 3600,
        1..=MAX_PERIOD,
        MAX_PERIOD - 1000..=MAX_PERIOD
    ]
}

/// The bytes each of an algorithm's keys should hold for a core state.
fn expected<A: LuaAlgorithm>(alg: &A, state: Option<&A::State>) -> Vec<Option<Vec<u8>>> {
    key_values(state.map(|s| alg.lua_encode(s)), alg.lua_keys())
}

/// What a step got: a decision, or a report's answer.
#[derive(Debug, PartialEq, Eq)]
enum Answer {
    Decided(Decision),
    Reported(Reported),
}

/// A check, by the core and by Redis.
fn checked<A: LuaAlgorithm>() -> (Decide<A>, RedisDecide<A>) {
    (
        |alg, state, now, step| decided(alg.decide(state, now, step.cost)),
        |limiter, con, key, now, step| {
            limiter
                .check_request(con, &Request::new(key).cost(step.cost).at(now))
                .map(Answer::Decided)
        },
    )
}

fn decided<S>((decision, state): (Decision, S)) -> (Answer, S) {
    (Answer::Decided(decision), state)
}

/// A reservation (a check where a step has no wait), by the core and by Redis.
fn reserved<A: LuaAlgorithm + Reserve>() -> (Decide<A>, RedisDecide<A>) {
    (
        |alg, state, now, step| match step.max_wait {
            Some(wait) => decided(alg.reserve(state, now, step.cost, wait)),
            None => decided(alg.decide(state, now, step.cost)),
        },
        |limiter, con, key, now, step| {
            let request = Request::new(key).cost(step.cost).at(now);
            match step.max_wait {
                Some(wait) => limiter.reserve(con, &request, wait),
                None => limiter.check_request(con, &request),
            }
            .map(Answer::Decided)
        },
    )
}

/// A report where a step has an adjustment, else a check, by the core and by Redis.
fn reporting<A: LuaAlgorithm + Report>() -> (Decide<A>, RedisDecide<A>) {
    (
        |alg, state, now, step| match step.adjust {
            Some(adjust) => {
                let (reported, state) = alg.report(state, now, adjust);
                (Answer::Reported(reported), state)
            }
            None => decided(alg.decide(state, now, step.cost)),
        },
        |limiter, con, key, now, step| match step.adjust {
            Some(adjust) => limiter
                .report(con, &ReportRequest::new(key).adjust(adjust).at(now))
                .map(Answer::Reported),
            None => limiter
                .check_request(con, &Request::new(key).cost(step.cost).at(now))
                .map(Answer::Decided),
        },
    )
}

/// A limiter for `alg` on `route`, under a fresh prefix (the fast path's cases).
fn limiter<A: LuaAlgorithm + Clone>(alg: &A, route: Route) -> RedisLimiter<A> {
    RedisLimiter::new(alg.clone())
        .expect("parameters in the Lua range")
        .with_prefix(prefix())
        .with_route(route)
        .expect("a route the client speaks")
}

/// The core's answer to a step, and the state after it.
type Decide<A> = fn(
    &A,
    Option<<A as Algorithm>::State>,
    Ticks,
    &Step,
) -> (Answer, Option<<A as Algorithm>::State>);

/// Redis's answer to a step on a key at a time.
type RedisDecide<A> =
    fn(&RedisLimiter<A>, &mut redis::Connection, &[u8], Ticks, &Step) -> Result<Answer, Error>;

/// Runs `steps` through the core (`decide`) and Redis (`redis`) side by side.
fn differential<A: LuaAlgorithm + Clone>(
    server: &Server,
    alg: A,
    trace: &Trace,
    checks: (Decide<A>, RedisDecide<A>),
) -> Result<(), TestCaseError> {
    differential_at(server, &|_| alg.clone(), trace, checks)
}

/// [`differential`] with the algorithm of each step's time given by `at` (a calendar
/// window in the period the host computes then).
fn differential_at<A: LuaAlgorithm + Clone>(
    server: &Server,
    at: &dyn Fn(Ticks) -> A,
    trace: &Trace,
    (decide, redis): (Decide<A>, RedisDecide<A>),
) -> Result<(), TestCaseError> {
    for route in [Route::Module, Route::Functions, Route::Scripts] {
        let prefix = prefix();
        let limiter = |alg: &A| {
            RedisLimiter::new(alg.clone())
                .expect("parameters in the Lua range")
                .with_prefix(prefix.clone())
                .with_route(route)
                .expect("a route the client speaks")
        };
        let taken = run_trace(server, at, limiter, trace, decide, redis)?;
        prop_assert_eq!(taken, Some(route));
    }
    Ok(())
}

/// Runs `trace` through the core and a limiter for the algorithm `at` gives at each
/// step's time; returns the route the last call took.
fn run_trace<A: LuaAlgorithm + Clone>(
    server: &Server,
    at: &dyn Fn(Ticks) -> A,
    limiter: impl Fn(&A) -> RedisLimiter<A>,
    trace: &Trace,
    decide: Decide<A>,
    redis: RedisDecide<A>,
) -> Result<Option<Route>, TestCaseError> {
    let mut con = server.connection();
    let mut states: [Option<A::State>; 3] = Default::default();
    let mut now = trace.start;
    let mut route = None;
    for step in &trace.steps {
        now += step.gap;
        let alg = at(now);
        let limiter = limiter(&alg);
        let key = [b'k', step.key];
        let keys = limiter.redis_keys(&key).expect("keys");
        let slot = usize::from(step.key);
        let got = redis(&limiter, &mut con, &key, now, step);
        route = limiter.route();
        if alg.lua_now_range(now).is_err() {
            // Beyond the scripts' range (the core's; a sliding log's, 2^52): refused
            // before reaching Redis.
            prop_assert!(
                matches!(got, Err(Error::OutOfRange { what: "now", .. })),
                "{:?} at {}",
                got,
                now
            );
        } else {
            let (want, new) = decide(&alg, states[slot].clone(), now, step);
            match got {
                // A reservation booked beyond the scripts' range: refused, nothing changed.
                Err(Error::Corrupt { reason, .. })
                    if reason.starts_with("beyond the Redis scripts' range")
                        && booked_beyond(&expected(&alg, new.as_ref()), now) => {}
                got => {
                    let got = got.map_err(|e| TestCaseError::fail(format!("{e}")))?;
                    prop_assert_eq!(got, want, "at {} {:?}", now, step);
                    states[slot] = new;
                }
            }
        }
        let stored: Vec<Option<Vec<u8>>> =
            redis::cmd("MGET").arg(&keys).query(&mut con).expect("MGET");
        prop_assert_eq!(
            stored,
            expected(&alg, states[slot].as_ref()),
            "bytes at {:?}",
            step
        );
        for key in &keys {
            let pttl: i64 = redis::cmd("PTTL").arg(key).query(&mut con).expect("PTTL");
            // A state written at an explicit time has no expiry; a fresh one no key.
            prop_assert!(pttl == -1 || pttl == -2, "PTTL {}", pttl);
        }
    }
    Ok(route)
}

/// Whether a key's bytes hold a bucket (alone or in a ban) whose arrival time is more
/// than 2^53 ticks after `now`: the deepest the scripts book (see `lua/bucket.lua`).
fn booked_beyond(values: &[Option<Vec<u8>>], now: Ticks) -> bool {
    values.iter().flatten().any(|bytes| {
        let bucket = if bytes[1] == 7 {
            &bytes[26..]
        } else {
            &bytes[..]
        };
        if !matches!(bucket.get(1), Some(4..=6)) {
            return false;
        }
        let field = |at: usize| u64::from_be_bytes(bucket[at..at + 8].try_into().unwrap());
        let (ticks, frac) = (field(2), field(10));
        ticks - now > 1 << 53 || (ticks - now == 1 << 53 && frac > 0)
    })
}

/// Whether `alg` was built and the scripts compute it exactly.
fn in_lua_range<A: LuaAlgorithm, E>(alg: Result<A, E>) -> bool {
    alg.is_ok_and(|a| RedisLimiter::new(a).is_ok())
}

/// Bucket parameters within the Lua range, as (capacity, rate, period): any, or a
/// horizon `capacity × period / rate` within a few units of the core's longest, 2^53.
fn bucket() -> impl Strategy<Value = (u64, u64, Ticks)> {
    let deepest = (limit(), period(), 0..4u64).prop_map(|(r, p, less)| {
        let c = (1u128 << 53) * u128::from(r) / u128::from(p);
        let c = u64::try_from(c).unwrap_or(u64::MAX).min(MAX_LUA_LIMIT);
        (c - less.min(c - 1), r, p)
    });
    prop_oneof![3 => (limit(), limit(), period()), 1 => deepest]
        .prop_filter("horizon within the Lua range", |&(c, r, p)| {
            in_lua_range(TokenBucket::new(c, r, p))
        })
}

/// Pacing parameters within the Lua range; the capacity may be zero.
fn pacing_bucket() -> impl Strategy<Value = (u64, u64, Ticks)> {
    (prop_oneof![Just(0), limit()], limit(), period())
        .prop_filter("horizon within the Lua range", |&(c, r, p)| {
            in_lua_range(Pacing::new(c, r, p))
        })
}

/// Parameters and a trace shaped by them: `shape` gives the period and limit the gaps and
/// costs are drawn around.
fn with_steps<P: Clone + std::fmt::Debug>(
    params: impl Strategy<Value = P>,
    shape: impl Fn(&P) -> (Ticks, u64),
) -> impl Strategy<Value = (P, Trace)> {
    with_trace(params, shape, false)
}

/// [`with_steps`], with reports among the steps.
fn with_reports<P: Clone + std::fmt::Debug>(
    params: impl Strategy<Value = P>,
    shape: impl Fn(&P) -> (Ticks, u64),
) -> impl Strategy<Value = (P, Trace)> {
    with_trace(params, shape, true)
}

fn with_trace<P: Clone + std::fmt::Debug>(
    params: impl Strategy<Value = P>,
    shape: impl Fn(&P) -> (Ticks, u64),
    reports: bool,
) -> impl Strategy<Value = (P, Trace)> {
    params.prop_flat_map(move |p| {
        let (period, limit) = shape(&p);
        (Just(p), steps(period, limit, reports))
    })
}
