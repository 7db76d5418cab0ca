//! The fleet's transitions in Lua against the core: random traces of decisions, takes
//! and give-backs at explicit times, through the function library and through
//! `EVALSHA`; after every step the decision and the units taken are the core's, and the
//! key holds exactly the core's encoding (or is gone when the core's state is fresh).
//! Traces start in 2026, just before 2^52 (where the scripts' instants stop being
//! doubles) or just before the core's last instant.

use proptest::prelude::*;
use redis::Commands;
use sluicegate_core::limits::MAX_PERIOD;
use sluicegate_core::{
    FixedWindow, Refund, Request, Reserve, SlidingCounter, Ticks, TokenBucket, MAX_TICKS, SECOND,
};
use sluicegate_redis::{LuaAlgorithm, RedisLimiter, Route, MAX_LUA_TICKS};

use crate::common::strategy::{cost, gap, limit};
use crate::common::{self, Server};

/// Around 2026 in µs since the Unix epoch.
const EPOCH: Ticks = 1_790_000_000_000_000;

#[derive(Debug, Clone, Copy)]
enum Op {
    Check,
    Take,
    Refund,
    /// Buckets only: units booked whole, into debt if need be.
    Charge,
}

/// A trace's start and its steps (operation, gap before it, cost).
type Trace = (Ticks, Vec<(Op, Ticks, u64)>);

fn trace(period: Ticks, limit: u64, charges: bool) -> impl Strategy<Value = Trace> {
    let charge = if charges { Op::Charge } else { Op::Take };
    let op = prop_oneof![
        Just(Op::Check),
        Just(Op::Take),
        Just(Op::Refund),
        Just(charge)
    ];
    let back = 0..=2 * period;
    let start = prop_oneof![
        2 => Just(EPOCH),
        1 => back.clone().prop_map(|back| MAX_LUA_TICKS - back),
        1 => back.prop_map(move |back| MAX_TICKS - 40 * 3 * period - back),
    ];
    (
        start,
        prop::collection::vec((op, gap(period), cost(limit)), 1..40),
    )
}

fn period() -> impl Strategy<Value = Ticks> {
    prop_oneof![
        1..=10u64,
        1..=10_000u64,
        1..=SECOND * 3600,
        1..=MAX_PERIOD / 366
    ]
}

/// A charge in the core: a reservation with no bound on its wait.
type Charge<A> = fn(
    &A,
    Option<<A as sluicegate_core::Algorithm>::State>,
    Ticks,
    u64,
) -> (
    u64,
    sluicegate_core::Decision,
    Option<<A as sluicegate_core::Algorithm>::State>,
);

/// The same charge through Redis.
type RedisCharge<A> = fn(
    &RedisLimiter<A>,
    &mut redis::Connection,
    u64,
    Ticks,
) -> Result<sluicegate_redis::Taken, sluicegate_redis::Error>;

/// Runs `trace` through the core and through Redis on both Lua routes; charges through
/// `charge` (buckets only).
fn differential<A: LuaAlgorithm + Refund + Clone>(
    server: &Server,
    algorithm: &A,
    (start, trace): &Trace,
    charge: Option<(Charge<A>, RedisCharge<A>)>,
) -> Result<(), TestCaseError> {
    for route in [Route::Functions, Route::Scripts] {
        let limiter = RedisLimiter::new(algorithm.clone())
            .map_err(|e| TestCaseError::reject(e.to_string()))?
            .with_route(route)
            .unwrap();
        let mut con = server.connection();
        let _: () = redis::cmd("FLUSHALL").query(&mut con).unwrap();
        let (mut state, mut now) = (None, *start);
        for (i, &(op, gap, cost)) in trace.iter().enumerate() {
            now += gap;
            let (core, redis) = match op {
                Op::Check => {
                    let (d, s) = algorithm.decide(state.clone(), now, cost);
                    state = s;
                    (
                        (d, 0),
                        (
                            limiter
                                .check_request(&mut con, &Request::new(b"k").cost(cost).at(now))
                                .unwrap(),
                            0,
                        ),
                    )
                }
                Op::Take | Op::Charge => {
                    let (units, d, s) = match (op, charge) {
                        (Op::Charge, Some((core, _))) => core(algorithm, state.clone(), now, cost),
                        _ => algorithm.take(state.clone(), now, cost),
                    };
                    let taken = match (op, charge) {
                        (Op::Charge, Some((_, redis))) => redis(&limiter, &mut con, cost, now),
                        _ => Ok(limiter
                            .take(&mut con, &Request::new(b"k").cost(cost).at(now))
                            .unwrap()),
                    };
                    let taken = match taken {
                        Ok(taken) => taken,
                        // A reservation booked more than 2^53 ticks ahead: refused by the
                        // scripts (the documented range), the key unchanged.
                        Err(sluicegate_redis::Error::Corrupt { reason, .. })
                            if reason.contains("beyond the Redis scripts' range") =>
                        {
                            prop_assert_eq!(units, cost, "only an admitted charge books ahead");
                            let stored: Option<Vec<u8>> = con.get("k").unwrap();
                            let kept = state.as_ref().map(|s| algorithm.encode_to_vec(s));
                            prop_assert_eq!(stored, kept);
                            continue;
                        }
                        Err(e) => return Err(TestCaseError::fail(e.to_string())),
                    };
                    state = s;
                    prop_assert_eq!(taken.now, now);
                    let bytes = state.as_ref().map(|s| algorithm.encode_to_vec(s));
                    prop_assert_eq!(&taken.state, &bytes);
                    ((d, units), (taken.decision, taken.units))
                }
                Op::Refund => {
                    state = algorithm.refund(state.clone(), now, cost);
                    let d = algorithm.peek(state.clone(), now, 0);
                    (
                        (d, 0),
                        (
                            limiter
                                .refund(&mut con, &Request::new(b"k").cost(cost).at(now), None)
                                .unwrap(),
                            0,
                        ),
                    )
                }
            };
            prop_assert_eq!(core, redis, "{:?} step {} {:?} cost {}", route, i, op, cost);
            let stored: Option<Vec<u8>> = con.get("k").unwrap();
            let expected = state.as_ref().map(|s| algorithm.encode_to_vec(s));
            prop_assert_eq!(stored, expected, "{:?} step {} {:?}", route, i, op);
        }
    }
    Ok(())
}

fn cases<S: Strategy>(strategy: S, test: impl Fn(&Server, S::Value) -> Result<(), TestCaseError>) {
    common::cases(&Server::start(), 32, strategy, test);
}

#[test]
fn token_bucket_take_and_refund_match_the_core() {
    let params = (limit(), limit(), period())
        .prop_flat_map(|(c, r, p)| (Just((c, r, p)), trace(p, c, true)));
    cases(params, |server, ((c, r, p), trace)| {
        let Ok(bucket) = TokenBucket::new(c, r, p) else {
            return Ok(());
        };
        differential(server, &bucket, &trace, Some(BUCKET_CHARGE))
    });
}

/// A bucket's charge: a reservation however long its wait, in the core and on Redis.
const BUCKET_CHARGE: (Charge<TokenBucket>, RedisCharge<TokenBucket>) = (
    |bucket, state, now, units| {
        let (d, s) = bucket.reserve(state, now, units, Ticks::MAX);
        (if d.allowed { units } else { 0 }, d, s)
    },
    |limiter, con, units, now| limiter.charge(con, &Request::new(b"k").cost(units).at(now)),
);

/// Found by the property test at the top of the range: charges take the bucket deeper
/// than a burst, and a refund gives back at most a burst.
#[test]
fn a_refund_after_charges_deeper_than_a_burst() {
    let bucket = TokenBucket::new(999_999_176, 2, 6615).unwrap();
    let trace = (
        EPOCH,
        vec![
            (Op::Charge, 101, 999_999_175),
            (Op::Charge, 281, 60_789_639),
            (Op::Refund, 2, u64::MAX),
        ],
    );
    differential(&Server::start(), &bucket, &trace, Some(BUCKET_CHARGE)).unwrap();
}

/// Found by the property test: a charge of the whole capacity at 32 units per 511 s
/// books 8.6 × 10^15 ticks ahead, beyond the scripts' 2^53; Redis refuses it, the key
/// unchanged, and the trace goes on.
#[test]
fn a_charge_beyond_the_scripts_range_is_refused_and_changes_nothing() {
    let bucket = TokenBucket::new(540_849_388, 32, 510_932_555).unwrap();
    let trace = (
        EPOCH,
        vec![
            (Op::Check, 0, 24_215_710),
            (Op::Charge, 1, 540_849_388),
            (Op::Take, 1, 1),
        ],
    );
    differential(&Server::start(), &bucket, &trace, Some(BUCKET_CHARGE)).unwrap();
}

#[test]
fn fixed_window_take_and_refund_match_the_core() {
    let params = (limit(), period()).prop_flat_map(|(l, p)| (Just((l, p)), trace(p, l, false)));
    cases(params, |server, ((l, p), trace)| {
        differential(server, &FixedWindow::new(l, p).unwrap(), &trace, None)
    });
}

#[test]
fn sliding_counter_take_and_refund_match_the_core() {
    let params = (limit(), period()).prop_flat_map(|(l, p)| (Just((l, p)), trace(p, l, false)));
    cases(params, |server, ((l, p), trace)| {
        differential(server, &SlidingCounter::new(l, p).unwrap(), &trace, None)
    });
}

/// A give-back reaching the server at or after its deadline changes nothing; at an
/// explicit time (here beyond 2^52) too.
#[test]
fn refund_after_the_deadline_is_dropped() {
    let server = Server::start();
    let mut con = server.connection();
    let limiter = RedisLimiter::new(FixedWindow::new(10, 3600 * SECOND).unwrap()).unwrap();
    let taken = limiter.take(&mut con, &Request::new(b"w").cost(6)).unwrap();
    assert_eq!(taken.units, 6);
    let late = limiter
        .refund(&mut con, &Request::new(b"w").cost(6), Some(taken.now))
        .unwrap();
    assert_eq!(late.remaining, 4);
    let in_time = limiter
        .refund(
            &mut con,
            &Request::new(b"w").cost(6),
            Some(taken.now + 3600 * SECOND),
        )
        .unwrap();
    assert_eq!(in_time.remaining, 10);
    let now = MAX_TICKS - 5;
    let at = || Request::new(b"x").cost(6).at(now);
    let taken = limiter.take(&mut con, &at()).unwrap();
    assert_eq!((taken.units, taken.now), (6, now));
    let late = limiter.refund(&mut con, &at(), Some(now)).unwrap();
    assert_eq!(late.remaining, 4);
    let in_time = limiter.refund(&mut con, &at(), Some(now + 1)).unwrap();
    assert_eq!(in_time.remaining, 10);
}
