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

mod common;

use proptest::prelude::*;
use sluicegate_core::limits::MAX_PERIOD;
use sluicegate_core::{
    Algorithm, AnyAlgorithm, Ban, CalendarPeriod, CalendarWindow, CalendarWindowAt, Composite,
    Decision, FixedWindow, LeakyBucket, Pacing, Report, ReportRequest, Reported, Request, Reserve,
    SlidingCounter, SlidingLog, Ticks, TokenBucket, MAX_TICKS, SECOND,
};
use sluicegate_redis::{Error, LuaAlgorithm, Path, RedisLimiter, MAX_LUA_LIMIT, MAX_LUA_TICKS};

use common::strategy::{adjustment, cost, gap, limit, overdraft};
use common::Server;

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

/// A ban threshold: small, or near 2^52 (the scripts' double path ends there), 2^53
/// (where doubles stop being exact), 2^63 or the core's largest, `u64::MAX - 1`.
fn threshold() -> impl Strategy<Value = u64> {
    let near = |x: u64| x - 4..=x + 4;
    prop_oneof![
        4 => 0..=8u64,
        1 => near(1 << 52),
        1 => near(1 << 53),
        1 => near(1 << 63),
        1 => u64::MAX - 8..=u64::MAX - 1
    ]
}

/// A denied cost near a bound of a ban's count for `threshold`: the threshold itself, its
/// half (two of them reach it), 2^53 (beyond it a cost is not exact as a double) and the
/// threshold less 2^53 (after which the room left is 2^53).
fn ban_cost(threshold: u64) -> impl Strategy<Value = u64> {
    let near = |x: u64| x.saturating_sub(2)..=x.saturating_add(2);
    prop_oneof![
        near(threshold),
        near(threshold / 2),
        near(1 << 53),
        near(threshold.saturating_sub(1 << 53))
    ]
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
type Expected<A> = fn(&A, Option<&<A as Algorithm>::State>) -> Vec<Option<Vec<u8>>>;

fn one_key<A: Algorithm>(alg: &A, state: Option<&A::State>) -> Vec<Option<Vec<u8>>> {
    vec![state.map(|s| alg.encode_to_vec(s))]
}

fn member_keys<A: Algorithm>(
    alg: &Composite<A>,
    state: Option<&Vec<Option<A::State>>>,
) -> Vec<Option<Vec<u8>>> {
    alg.members()
        .iter()
        .enumerate()
        .map(|(i, m)| {
            state
                .and_then(|s| s[i].as_ref())
                .map(|s| m.encode_to_vec(s))
        })
        .collect()
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

/// A limiter for `alg` on `path`, under a fresh prefix (the fast path's cases).
fn limiter<A: LuaAlgorithm + Clone>(alg: &A, path: Path) -> RedisLimiter<A> {
    RedisLimiter::new(alg.clone())
        .expect("parameters in the Lua range")
        .with_prefix(prefix())
        .with_path(path)
        .expect("a path the client speaks")
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

/// Runs `steps` through the core (`decide`) and Redis (`redis`) side by side;
/// `expected` the bytes stored.
fn differential<A: LuaAlgorithm + Clone>(
    server: &Server,
    alg: A,
    trace: &Trace,
    expected: Expected<A>,
    checks: (Decide<A>, RedisDecide<A>),
) -> Result<(), TestCaseError> {
    differential_at(server, &|_| alg.clone(), trace, expected, checks)
}

/// [`differential`] with the algorithm of each step's time given by `at` (a calendar
/// window in the period the host computes then).
fn differential_at<A: LuaAlgorithm + Clone>(
    server: &Server,
    at: &dyn Fn(Ticks) -> A,
    trace: &Trace,
    expected: Expected<A>,
    (decide, redis): (Decide<A>, RedisDecide<A>),
) -> Result<(), TestCaseError> {
    for path in [Path::Module, Path::Functions, Path::Scripts] {
        let prefix = prefix();
        let limiter = |alg: &A| {
            RedisLimiter::new(alg.clone())
                .expect("parameters in the Lua range")
                .with_prefix(prefix.clone())
                .with_path(path)
                .expect("a path the client speaks")
        };
        let taken = run_trace(server, at, limiter, trace, expected, decide, redis)?;
        prop_assert_eq!(taken, Some(path));
    }
    Ok(())
}

/// Runs `trace` through the core and a limiter for the algorithm `at` gives at each
/// step's time; returns the path the last call took.
fn run_trace<A: LuaAlgorithm + Clone>(
    server: &Server,
    at: &dyn Fn(Ticks) -> A,
    limiter: impl Fn(&A) -> RedisLimiter<A>,
    trace: &Trace,
    expected: Expected<A>,
    decide: Decide<A>,
    redis: RedisDecide<A>,
) -> Result<Option<Path>, TestCaseError> {
    let mut con = server.connection();
    let mut states: [Option<A::State>; 3] = Default::default();
    let mut now = trace.start;
    let mut path = None;
    for step in &trace.steps {
        now += step.gap;
        let alg = at(now);
        let limiter = limiter(&alg);
        let key = [b'k', step.key];
        let keys = limiter.redis_keys(&key).expect("keys");
        let slot = usize::from(step.key);
        let got = redis(&limiter, &mut con, &key, now, step);
        path = limiter.path();
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
    Ok(path)
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

#[test]
fn fixed_window() {
    cases(
        with_steps((limit(), period(), any::<bool>()), |&(l, p, _)| (p, l)),
        |server, ((limit, period, counting), steps)| {
            let mut alg = FixedWindow::new(limit, period).unwrap();
            if counting {
                alg = alg.counting_denied();
            }
            differential(server, alg, &steps, one_key, checked())
        },
    );
}

/// Checks of a window built by `new` from a random limit and period, limits drawn by
/// `limits`.
fn window_checks<A: LuaAlgorithm + Clone, E: std::fmt::Debug>(
    limits: impl Strategy<Value = u64>,
    new: fn(u64, Ticks) -> Result<A, E>,
) {
    cases(
        with_steps((limits, period()), |&(l, p)| (p, l)),
        |server, ((limit, period), steps)| {
            differential(
                server,
                new(limit, period).unwrap(),
                &steps,
                one_key,
                checked(),
            )
        },
    );
}

#[test]
fn sliding_counter() {
    window_checks(limit(), SlidingCounter::new);
}

#[test]
fn sliding_log() {
    window_checks(prop_oneof![1..=4u64, 1..=100u64], SlidingLog::new);
}

/// Reservations on a bucket built by `new` from random parameters drawn by `buckets`
/// (see [`bucket`]); `extra` more than its capacity admitted at once.
fn bucket_reserves<A: LuaAlgorithm + Reserve + Clone, E: std::fmt::Debug>(
    buckets: impl Strategy<Value = (u64, u64, Ticks)>,
    extra: u64,
    new: fn(u64, u64, Ticks) -> Result<A, E>,
) {
    cases(
        with_steps(buckets, move |&(c, _, p)| (p, c + extra)),
        |server, ((capacity, rate, period), steps)| {
            differential(
                server,
                new(capacity, rate, period).unwrap(),
                &steps,
                one_key,
                reserved(),
            )
        },
    );
}

#[test]
fn token_bucket() {
    bucket_reserves(bucket(), 0, TokenBucket::new);
}

#[test]
fn leaky_bucket() {
    bucket_reserves(bucket(), 0, LeakyBucket::new);
}

#[test]
fn pacing() {
    bucket_reserves(pacing_bucket(), 1, Pacing::new);
}

/// Checks of a [`Ban`] over an algorithm drawn by `inner` with its period and limit, its
/// threshold, window and duration random; `shape` gives the period and limit the trace
/// is drawn around from the inner period, limit and the ban's window.
fn ban_checks<A: LuaAlgorithm + Clone + std::fmt::Debug>(
    inner: impl Strategy<Value = (A, Ticks, u64)>,
    shape: fn(Ticks, u64, Ticks) -> (Ticks, u64),
) {
    // A third of the steps' costs are drawn near the bounds of the ban's count instead.
    let params = with_steps(
        (inner, threshold(), period(), period()),
        move |&((_, p, l), _, w, _)| shape(p, l, w),
    )
    .prop_flat_map(|(params, trace)| {
        let costs = prop::collection::vec(
            prop::option::weighted(1.0 / 3.0, ban_cost(params.1)),
            trace.steps.len(),
        );
        (Just(params), Just(trace), costs)
    })
    .prop_map(|(params, mut trace, costs)| {
        for (step, cost) in trace.steps.iter_mut().zip(costs) {
            step.cost = cost.unwrap_or(step.cost);
        }
        (params, trace)
    });
    cases(
        params,
        |server, (((alg, _, _), threshold, window, duration), steps)| {
            let alg = Ban::new(alg, threshold, window, duration).unwrap();
            differential(server, alg, &steps, one_key, checked())
        },
    );
}

#[test]
fn ban() {
    let windows = (1..=20u64, period())
        .prop_map(|(limit, period)| (FixedWindow::new(limit, period).unwrap(), period, limit));
    ban_checks(windows, |p, l, w| (p.min(w), l));
}

#[test]
fn ban_bucket() {
    let buckets = bucket().prop_map(|(capacity, rate, period)| {
        let bucket = TokenBucket::new(capacity, rate, period).unwrap();
        (bucket, period, capacity)
    });
    ban_checks(buckets, |p, c, _| (p, c));
}

/// Bans beyond the doubles' range, up to the core's largest threshold (refused before):
/// once the inner window's one unit is taken, denied costs leave the threshold 2^53 + 1
/// away, then 1, then 0, then cross it; costs of 2^53 or more add exactly; `u64::MAX`
/// bans at once. In 2026 and near the core's last instant (the ban's fields then
/// relative to an epoch).
#[test]
fn ban_thresholds_beyond_doubles() {
    let server = Server::start_with_module(false);
    let step = |key, cost| Step {
        key,
        gap: 0,
        cost,
        max_wait: None,
        adjust: None,
    };
    for threshold in [(1 << 52) + 1, (1 << 53) + 1, (1 << 63) + 5, u64::MAX - 1] {
        let far = threshold.saturating_sub((1 << 53) + 1);
        let half = threshold / 2;
        let steps = vec![
            step(0, 1),
            step(0, far),
            step(0, 1 << 53),
            step(0, 0),
            step(0, 1),
            step(0, 1),
            step(0, 1),
            step(1, u64::MAX),
            step(2, 1),
            step(2, half),
            step(2, threshold - half - 1),
            step(2, 2),
        ];
        for start in [EPOCH, MAX_TICKS - SECOND] {
            let inner = FixedWindow::new(1, SECOND).unwrap();
            let alg = Ban::new(inner, threshold, 3600 * SECOND, SECOND).unwrap();
            let trace = Trace {
                start,
                steps: steps.clone(),
            };
            differential(&server, alg, &trace, one_key, checked()).unwrap();
        }
    }
}

#[test]
fn composite_windows() {
    cases(
        with_steps(prop::collection::vec((limit(), period()), 1..4), |m| {
            (m[0].1, m[0].0)
        }),
        |server, (limits, steps)| {
            let members = limits
                .iter()
                .map(|&(l, p)| SlidingCounter::new(l, p).unwrap())
                .collect();
            let alg = Composite::new(members).unwrap();
            differential(server, alg, &steps, member_keys, checked())
        },
    );
}

#[test]
fn composite_pacing() {
    cases(
        with_steps(prop::collection::vec(pacing_bucket(), 1..4), |m| {
            (m[0].2, m[0].0 + 1)
        }),
        |server, (buckets, steps)| {
            let members = buckets
                .iter()
                .map(|&(c, r, p)| Pacing::new(c, r, p).unwrap())
                .collect();
            let alg = Composite::new(members).unwrap();
            differential(server, alg, &steps, member_keys, reserved())
        },
    );
}

/// A window's parameters: limit, period, overdraft (at most `most`) and whether denied
/// requests count.
type WindowParams = (u64, Ticks, u64, bool);

/// Reports, refunds and checks on a window built by `new` from random parameters.
fn window_reports<A: LuaAlgorithm + Report + Clone>(
    limits: impl Strategy<Value = u64>,
    most: u64,
    new: fn(WindowParams) -> A,
) {
    let params = (limits, period(), any::<bool>()).prop_flat_map(move |(l, p, counting)| {
        let over = overdraft(l).prop_map(move |o| o.min(most));
        (Just(l), Just(p), over, Just(counting))
    });
    cases(
        with_reports(params, |&(l, p, _, _)| (p, l)),
        |server, (params, steps)| differential(server, new(params), &steps, one_key, reporting()),
    );
}

#[test]
fn report_fixed_window() {
    window_reports(limit(), MAX_LUA_LIMIT, |(limit, period, over, counting)| {
        let alg = FixedWindow::new(limit, period).unwrap();
        let alg = if counting { alg.counting_denied() } else { alg };
        alg.with_overdraft(over).unwrap()
    });
}

#[test]
fn report_sliding_counter() {
    window_reports(limit(), MAX_LUA_LIMIT, |(limit, period, over, _)| {
        let alg = SlidingCounter::new(limit, period).unwrap();
        alg.with_overdraft(over).unwrap()
    });
}

#[test]
fn report_sliding_log() {
    window_reports(
        prop_oneof![1..=4u64, 1..=100u64],
        100,
        |(limit, period, over, _)| {
            SlidingLog::new(limit, period)
                .unwrap()
                .with_overdraft(over)
                .unwrap()
        },
    );
}

/// A member of a reporting composite, or a reporting algorithm alone: a window or a
/// bucket with an overdraft (0 where the scripts' range takes no other), or a pacing
/// queue (which records nothing); `None` outside the scripts' range.
fn reporting_member(
    (kind, limit, rate, period, over): (u8, u64, u64, Ticks, u64),
) -> Option<AnyAlgorithm> {
    let built =
        |alg: Result<AnyAlgorithm, _>| alg.ok().filter(|a| RedisLimiter::new(a.clone()).is_ok());
    let with = |over: u64| -> Option<AnyAlgorithm> {
        built(match kind {
            0 => FixedWindow::new(limit, period)
                .and_then(|a| a.with_overdraft(over))
                .map(Into::into),
            1 => SlidingCounter::new(limit, period)
                .and_then(|a| a.with_overdraft(over))
                .map(Into::into),
            2 => TokenBucket::new(limit, rate, period)
                .and_then(|a| a.with_overdraft(over))
                .map(Into::into),
            3 => LeakyBucket::new(limit, rate, period)
                .and_then(|a| a.with_overdraft(over))
                .map(Into::into),
            _ => Pacing::new(limit, rate, period).map(Into::into),
        })
    };
    with(over).or_else(|| with(0))
}

/// Random reporting parameters of `kinds` (see [`reporting_member`]).
fn reporting_params(kinds: std::ops::Range<u8>) -> impl Strategy<Value = AnyAlgorithm> {
    (kinds, limit(), limit(), period())
        .prop_flat_map(|(k, l, r, p)| (Just(k), Just(l), Just(r), Just(p), overdraft(l)))
        .prop_filter_map("within the Lua range", reporting_member)
}

/// The period and limit a reporting algorithm's trace is drawn around.
fn reporting_shape(alg: &AnyAlgorithm) -> (Ticks, u64) {
    match alg {
        AnyAlgorithm::FixedWindow(a) => (a.params().period, a.params().limit),
        AnyAlgorithm::SlidingCounter(a) => (a.params().period, a.params().limit),
        AnyAlgorithm::TokenBucket(a) => (a.params().period, a.params().capacity),
        AnyAlgorithm::LeakyBucket(a) => (a.params().period, a.params().capacity),
        AnyAlgorithm::Pacing(a) => (a.params().period, a.params().capacity + 1),
        _ => (SECOND, 10),
    }
}

#[test]
fn report_buckets() {
    cases(
        with_reports(reporting_params(2..4), reporting_shape),
        |server, (alg, steps)| differential(server, alg, &steps, one_key, reporting()),
    );
}

#[test]
fn report_composite() {
    cases(
        with_reports(prop::collection::vec(reporting_params(0..5), 1..4), |m| {
            reporting_shape(&m[0])
        }),
        |server, (members, steps)| {
            let alg = Composite::new(members).unwrap();
            differential(server, alg, &steps, member_keys, reporting())
        },
    );
}

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
            differential_at(server, &at, &steps, one_key, reporting())
        },
    );
}

/// At the server's time a calendar window decides and reports in the period holding
/// it, its key living until the period's end; outside it every path refuses with the
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
    for path in [Path::Module, Path::Functions, Path::Scripts] {
        let limiter = |alg| {
            RedisLimiter::new(alg)
                .unwrap()
                .with_prefix(prefix())
                .with_path(path)
                .unwrap()
        };
        let current = limiter(today);
        let decision = current.check(&mut con, b"k", 4).unwrap();
        assert!(
            decision.allowed && decision.remaining == 6,
            "{path:?}: {decision:?}"
        );
        let reported = current
            .report(&mut con, &ReportRequest::new(b"k").adjust(20))
            .unwrap();
        assert_eq!((reported.recorded, reported.dropped), (11, 9), "{path:?}");
        assert!(!reported.decision.allowed, "{path:?}");
        let key = current.redis_keys(b"k").unwrap().remove(0);
        let pttl: u64 = redis::cmd("PTTL").arg(&key).query(&mut con).unwrap();
        assert!(pttl > (day - 60 * SECOND) / 1000, "{path:?}: PTTL {pttl}");
        let stale = limiter(yesterday);
        for got in [
            stale.check(&mut con, b"k", 1).map(|_| ()),
            stale
                .report(&mut con, &ReportRequest::new(b"k").adjust(-1))
                .map(|_| ()),
        ] {
            match got {
                Err(Error::OutOfPeriod { now: at }) => assert!(at >= now, "{path:?}"),
                other => panic!("{path:?}: {other:?}"),
            }
        }
    }
}

/// The buckets' fast path (`lua/bucket_fast.lua`) where its quantities straddle its
/// bound, 2^52 units of `1 / rate` tick: `burst × period`, and the stored arrival time
/// (relative to `now`) plus `cost × period`, each drawn within a few units of it. Below
/// the bound the library's `bucket` function answers with one integer, beyond it with
/// the general path's fields; on every path the decision and the stored bytes are the
/// core's.
/// The fast path's bound (`lua/bucket_fast.lua`).
const BOUND: u64 = 1 << 52;

#[test]
fn bucket_fast_path_bound() {
    // (kind, capacity, rate, period): burst × period within 3 × burst of the bound.
    let params = (0..3u8, 1..=MAX_LUA_LIMIT, 1..=MAX_LUA_LIMIT, -3i64..=3).prop_filter_map(
        "within the Lua range",
        |(kind, capacity, rate, delta)| {
            let burst = capacity + u64::from(kind == 2);
            let period = (BOUND / burst).checked_add_signed(delta)?;
            let ok = match kind {
                0 => in_lua_range(TokenBucket::new(capacity, rate, period)),
                1 => in_lua_range(LeakyBucket::new(capacity, rate, period)),
                _ => in_lua_range(Pacing::new(capacity, rate, period)),
            };
            ok.then_some((kind, capacity, rate, period, burst))
        },
    );
    let case = params.prop_flat_map(|(kind, capacity, rate, period, burst)| {
        let cost = prop_oneof![Just(0), Just(1), 0..=burst, Just(burst), Just(burst + 1)];
        let wait = prop_oneof![
            Just(None),
            Just(Some(0)),
            (0..=BOUND).prop_map(Some),
            Just(Some(u64::MAX))
        ];
        let near = -3i64..=3;
        (
            Just((kind, capacity, rate, period)),
            cost,
            wait,
            near,
            0..4u8,
            0..BOUND,
        )
    });
    cases(
        case,
        |server, ((kind, capacity, rate, period), cost, wait, delta, shape, anywhere)| {
            // The state's arrival time relative to now: none, anywhere below the bound,
            // or within 3 units of where it and the cost reach the bound.
            let scaled_cost = cost.saturating_mul(period);
            let relative = match shape {
                0 => 0,
                1 => anywhere,
                _ => BOUND
                    .saturating_sub(scaled_cost)
                    .saturating_add_signed(delta),
            };
            let case = FastCase {
                rate,
                period,
                relative,
                cost,
                wait,
            };
            match kind {
                0 => case.run(server, TokenBucket::new(capacity, rate, period).unwrap(), 4),
                1 => case.run(server, LeakyBucket::new(capacity, rate, period).unwrap(), 5),
                _ => case.run(server, Pacing::new(capacity, rate, period).unwrap(), 6),
            }
        },
    );
}

/// One decision of [`bucket_fast_path_bound`]: a state `relative` units of `1 / rate`
/// tick after `EPOCH`, decided at `EPOCH`.
struct FastCase {
    rate: u64,
    period: Ticks,
    relative: u64,
    cost: u64,
    wait: Option<Ticks>,
}

impl FastCase {
    fn run<A: LuaAlgorithm + Reserve + Clone>(
        &self,
        server: &Server,
        alg: A,
        tag: u8,
    ) -> Result<(), TestCaseError> {
        let mut con = server.connection();
        let bytes = (self.relative > 0).then(|| {
            let ticks = EPOCH + self.relative / self.rate;
            let frac = self.relative % self.rate;
            [&[1, tag][..], &ticks.to_be_bytes(), &frac.to_be_bytes()].concat()
        });
        let state = match &bytes {
            Some(bytes) => match alg.decode(bytes) {
                Ok(state) => Some(state),
                Err(_) => return Err(TestCaseError::reject("beyond the core's states")),
            },
            None => None,
        };
        let (want, new) = match self.wait {
            Some(wait) => alg.reserve(state, EPOCH, self.cost, wait),
            None => alg.decide(state, EPOCH, self.cost),
        };
        let want_bytes = new.map(|s| alg.encode_to_vec(&s));
        let set = |con: &mut redis::Connection, key: &[u8]| {
            if let Some(bytes) = &bytes {
                redis::cmd("SET")
                    .arg(key)
                    .arg(bytes)
                    .exec(con)
                    .expect("SET");
            }
        };
        for path in [Path::Module, Path::Functions, Path::Scripts] {
            let limiter = limiter(&alg, path);
            let key = limiter.redis_keys(b"k").expect("keys").remove(0);
            set(&mut con, &key);
            let got = match self.wait {
                Some(wait) => limiter.reserve(
                    &mut con,
                    &Request::new(b"k").cost(self.cost).at(EPOCH),
                    wait,
                ),
                None => {
                    limiter.check_request(&mut con, &Request::new(b"k").cost(self.cost).at(EPOCH))
                }
            };
            let got = got.map_err(|e| TestCaseError::fail(format!("{path:?}: {e}")))?;
            prop_assert_eq!(got, want, "{:?}", path);
            let stored: Option<Vec<u8>> = redis::cmd("GET").arg(&key).query(&mut con).unwrap();
            prop_assert_eq!(&stored, &want_bytes, "{:?}", path);
        }
        // The library's fast function itself (loaded by the calls above): one integer
        // exactly when every quantity is below the bound.
        let sent = self.cost.min(alg.lua_cost_cap());
        let Some(arg) = alg.lua_fast_arg(&Request::new("").cost(sent).at(EPOCH), self.wait) else {
            return Ok(());
        };
        let key = format!("{}raw", prefix()).into_bytes();
        set(&mut con, &key);
        let reply: redis::Value = redis::cmd("FCALL")
            .arg(format!("{}_bucket", sluicegate_redis::library_name()))
            .arg(1)
            .arg(&key)
            .arg(arg)
            .query(&mut con)
            .unwrap();
        let below = u128::from(self.relative) + u128::from(sent) * u128::from(self.period)
            < u128::from(BOUND);
        match reply {
            redis::Value::Int(relative) => {
                prop_assert!(below, "the fast path answered beyond its bound");
                let got = alg.lua_fast_decision(relative as u64, sent, self.wait);
                prop_assert_eq!(got, Some(want));
            }
            redis::Value::Array(_) => prop_assert!(!below, "the fast path left below its bound"),
            other => prop_assert!(false, "reply {:?}", other),
        }
        let stored: Option<Vec<u8>> = redis::cmd("GET").arg(&key).query(&mut con).unwrap();
        prop_assert_eq!(stored, want_bytes);
        Ok(())
    }
}

/// Reservations booked deeper than the scripts compute exactly (an arrival time more
/// than 2^53 ticks after now, where sums stop being doubles): each is the core's until
/// one would book that deep, then the scripts refuse it, naming their range and
/// changing nothing, in 2026 as beyond 2^52.
#[test]
fn a_reservation_beyond_the_scripts_range_is_refused() {
    let server = Server::start_with_module(false);
    let mut con = server.connection();
    // A horizon just under 2^51 ticks: a few full bursts reach past 2^53.
    let bucket = TokenBucket::new(71, 1, MAX_PERIOD).unwrap();
    for start in [EPOCH, MAX_LUA_TICKS + 1, MAX_TICKS - 16] {
        for path in [Path::Functions, Path::Scripts] {
            let limiter = limiter(&bucket, path);
            let key = limiter.redis_keys(b"k").unwrap().remove(0);
            let (mut state, mut refused) = (None, false);
            for now in start..start + 6 {
                let request = Request::new(b"k").cost(71).at(now);
                match limiter.reserve(&mut con, &request, u64::MAX) {
                    Ok(got) if !refused => {
                        let (want, new) = bucket.reserve(state.take(), now, 71, u64::MAX);
                        state = new;
                        assert_eq!(got, want, "{path:?} at {now}");
                    }
                    Err(Error::Corrupt { reason, .. }) => {
                        assert!(
                            reason.contains("beyond the Redis scripts' range"),
                            "{reason}"
                        );
                        refused = true;
                    }
                    other => panic!("{path:?} at {now}: {other:?}"),
                }
                let stored: Option<Vec<u8>> = redis::cmd("GET").arg(&key).query(&mut con).unwrap();
                assert_eq!(stored, state.as_ref().map(|s| bucket.encode_to_vec(s)));
            }
            assert!(refused, "{path:?} from {start}");
        }
    }
}
