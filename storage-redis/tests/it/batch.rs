//! Batches against single calls, on a real `redis-server` with the module loaded: random
//! sequences of batches (keys repeated within a batch, costs of 0, huge costs, keys
//! holding another type or bytes no state encodes) decided by `check_batch_at` on one
//! prefix and by `check_at` one request at a time on another, through the module's
//! `SLUICEGATE.BATCH` and the library's `batch`: the same decisions, the same errors and
//! the same stored bytes after every batch. Sequences start in 2026, just before 2^52
//! (where the scripts' instants stop being doubles) or just before the core's last
//! instant, and may step past it.

use proptest::prelude::*;
use sluicegate_core::limits::{MAX_LIMIT, MAX_PERIOD};
use sluicegate_core::{
    Ban, Composite, Decision, FixedWindow, LeakyBucket, Pacing, Request, SlidingCounter,
    SlidingLog, Ticks, TokenBucket, MAX_TICKS, SECOND,
};
use sluicegate_redis::{Error, LuaAlgorithm, RedisLimiter, Route, MAX_LUA_TICKS};

use crate::common::{self, Server};

/// Around 2026 in µs since the Unix epoch.
const EPOCH: Ticks = 1_790_000_000_000_000;

/// What a key is made to hold before a batch, on both sides.
#[derive(Debug, Clone, Copy)]
enum Spoil {
    /// A list: another type.
    Foreign,
    /// Bytes no state encodes.
    Corrupt,
}

/// One batch: the gap before it, its requests (which of four keys, the cost), and
/// perhaps a key spoiled first.
#[derive(Debug, Clone)]
struct Round {
    gap: Ticks,
    requests: Vec<(u8, u64)>,
    spoil: Option<(u8, Spoil)>,
}

fn rounds(period: Ticks, limit: u64) -> impl Strategy<Value = Vec<Round>> {
    let gap = prop_oneof![Just(0), 0..=period / 4, 0..=2 * period];
    let cost = prop_oneof![
        3 => Just(1),
        1 => Just(0),
        2 => 0..=limit + 2,
        1 => Just(u64::MAX),
        1 => any::<u64>()
    ];
    let spoil = prop_oneof![
        8 => Just(None),
        1 => (0..4u8).prop_map(|k| Some((k, Spoil::Foreign))),
        1 => (0..4u8).prop_map(|k| Some((k, Spoil::Corrupt))),
    ];
    let round = (gap, prop::collection::vec((0..4u8, cost), 1..40), spoil).prop_map(
        |(gap, requests, spoil)| Round {
            gap,
            requests,
            spoil,
        },
    );
    prop::collection::vec(round, 1..6)
}

/// A fresh key prefix per limiter, so cases never see each other's keys.
fn prefix() -> String {
    common::fresh("batch") + ":"
}

/// An error as a comparable text, the key (whose prefix differs) left out.
fn kind(result: Result<Decision, Error>) -> Result<Decision, String> {
    result.map_err(|e| match e {
        Error::Foreign { found, .. } => format!("foreign {found}"),
        Error::Corrupt { reason, .. } => format!("corrupt {reason}"),
        e => e.to_string(),
    })
}

/// Runs `rounds` from `start` through `check_batch_at` and through `check_at`, on `route`.
fn differential<A: LuaAlgorithm + Clone>(
    server: &Server,
    alg: &A,
    route: Route,
    (start, rounds): &(Ticks, Vec<Round>),
) -> Result<(), TestCaseError> {
    let limiter = |alg: &A| {
        RedisLimiter::new(alg.clone())
            .expect("parameters in the Lua range")
            .with_prefix(prefix())
            .with_route(route)
            .expect("a route the client speaks")
    };
    let (batched, single) = (limiter(alg), limiter(alg));
    let mut con = server.connection();
    let mut now = *start;
    for round in rounds {
        now += round.gap;
        if let Some((key, spoil)) = round.spoil {
            for limiter in [&batched, &single] {
                let redis_key = limiter.redis_keys(&[b'k', key]).expect("keys").remove(0);
                let () = redis::cmd("DEL").arg(&redis_key).query(&mut con).unwrap();
                match spoil {
                    Spoil::Foreign => redis::cmd("RPUSH")
                        .arg(&redis_key)
                        .arg("x")
                        .query::<i64>(&mut con)
                        .map(drop),
                    Spoil::Corrupt => redis::cmd("SET")
                        .arg(&redis_key)
                        .arg(b"\x01\x63bad")
                        .query::<()>(&mut con),
                }
                .unwrap();
            }
        }
        let keys: Vec<[u8; 2]> = round.requests.iter().map(|&(k, _)| [b'k', k]).collect();
        let requests: Vec<Request> = keys
            .iter()
            .zip(&round.requests)
            .map(|(key, &(_, cost))| Request::new(key).cost(cost).at(now))
            .collect();
        let got: Vec<_> = batched
            .check_batch(&mut con, &requests)
            .expect("the connection")
            .into_iter()
            .map(kind)
            .collect();
        let want: Vec<_> = requests
            .iter()
            .map(|request| kind(single.check_request(&mut con, request)))
            .collect();
        prop_assert_eq!(got, want, "at {} {:?}", now, round);
        for k in 0..4u8 {
            let stored = |limiter: &RedisLimiter<A>, con: &mut redis::Connection| {
                let keys = limiter.redis_keys(&[b'k', k]).expect("keys");
                keys.iter()
                    .map(|key| redis::cmd("DUMP").arg(key).query(con))
                    .collect::<Result<Vec<Option<Vec<u8>>>, _>>()
                    .expect("DUMP")
            };
            prop_assert_eq!(
                stored(&batched, &mut con),
                stored(&single, &mut con),
                "key {} after {:?}",
                k,
                round
            );
        }
    }
    Ok(())
}

/// Runs 24 random cases of each algorithm `make` builds on the module's and the
/// library's routes.
fn cases<A: LuaAlgorithm + Clone + std::fmt::Debug>(make: impl Strategy<Value = (A, Ticks, u64)>) {
    let strategy = make.prop_flat_map(|(alg, period, limit)| {
        let start = prop_oneof![
            2 => Just(EPOCH),
            1 => (0..=2 * period).prop_map(|back| MAX_LUA_TICKS - back),
            1 => (0..=2 * period).prop_map(|back| MAX_TICKS - back),
        ];
        (Just(alg), (start, rounds(period, limit)))
    });
    let server = Server::start_with_module(false);
    common::cases(&server, 24, strategy, |server, (alg, rounds)| {
        differential(server, &alg, Route::Module, &rounds)?;
        differential(server, &alg, Route::Functions, &rounds)
    });
}

fn period() -> impl Strategy<Value = Ticks> {
    prop_oneof![1..=10u64, 1..=SECOND * 60]
}

#[test]
fn token_bucket() {
    cases(
        (1..=10u64, 1..=10u64, period())
            .prop_map(|(c, r, p)| (TokenBucket::new(c, r, p).unwrap(), p, c)),
    );
}

#[test]
fn leaky_bucket_and_pacing() {
    cases(
        (1..=10u64, 1..=10u64, period())
            .prop_map(|(c, r, p)| (LeakyBucket::new(c, r, p).unwrap(), p, c)),
    );
    cases(
        (0..=10u64, 1..=10u64, period())
            .prop_map(|(c, r, p)| (Pacing::new(c, r, p).unwrap(), p, c)),
    );
}

#[test]
fn windows() {
    cases((1..=10u64, period()).prop_map(|(l, p)| (FixedWindow::new(l, p).unwrap(), p, l)));
    cases((1..=10u64, period()).prop_map(|(l, p)| (SlidingCounter::new(l, p).unwrap(), p, l)));
    cases((1..=10u64, period()).prop_map(|(l, p)| (SlidingLog::new(l, p).unwrap(), p, l)));
}

#[test]
fn ban_and_composite() {
    // Thresholds small, or beyond the doubles' 2^53 (counted in halves) up to the core's
    // largest: the rounds' huge costs add exactly there.
    let threshold = prop_oneof![
        2 => 0..=4u64,
        1 => (1u64 << 53) - 2..=(1 << 53) + 2,
        1 => (1u64 << 63) - 2..=(1 << 63) + 2,
        1 => u64::MAX - 3..=u64::MAX - 1
    ];
    cases((1..=5u64, period(), threshold).prop_map(|(l, p, t)| {
        let ban = Ban::new(FixedWindow::new(l, p).unwrap(), t, p, 2 * p).unwrap();
        (ban, p, l)
    }));
    cases((1..=5u64, period()).prop_map(|(c, p)| {
        let composite = Composite::new(vec![
            TokenBucket::new(c, 1, p).unwrap(),
            TokenBucket::new(c + 2, 3, 4 * p).unwrap(),
        ])
        .unwrap();
        (composite, p, c)
    }));
}

/// The top of the range: limits, capacities and rates within a thousand of 10^9 and
/// periods within a thousand ticks of 366 days, where the scripts compute in limbs.
#[test]
fn top_of_range() {
    let limit = || MAX_LIMIT - 1000..=MAX_LIMIT;
    let period = || MAX_PERIOD - 1000..=MAX_PERIOD;
    cases(
        (limit(), limit(), period())
            .prop_map(|(c, r, p)| (TokenBucket::new(c, r, p).unwrap(), p, c)),
    );
    cases((limit(), limit(), period()).prop_map(|(c, r, p)| (Pacing::new(c, r, p).unwrap(), p, c)));
    cases((limit(), period()).prop_map(|(l, p)| (SlidingCounter::new(l, p).unwrap(), p, l)));
    cases((limit(), period()).prop_map(|(l, p)| (FixedWindow::new(l, p).unwrap(), p, l)));
}

/// One command per batch: a batch of 32 is one `SLUICEGATE.BATCH` or one `FCALL`.
#[test]
fn a_batch_is_one_command() {
    let server = Server::start_with_module(false);
    let mut con = server.connection();
    let keys: Vec<Vec<u8>> = (0..32).map(|i| format!("u{i}").into_bytes()).collect();
    let requests: Vec<Request> = keys.iter().map(Request::new).collect();
    for (route, stat) in [
        (Route::Module, "cmdstat_sluicegate.batch:calls="),
        (Route::Functions, "cmdstat_fcall:calls="),
    ] {
        let limiter = RedisLimiter::new(TokenBucket::new(5, 1, SECOND).unwrap())
            .unwrap()
            .with_prefix(prefix())
            .with_route(route)
            .unwrap();
        // The first call may load the library.
        assert!(limiter.check(&mut con, b"warm", 1).unwrap().allowed);
        let () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query(&mut con)
            .unwrap();
        let results = limiter.check_batch(&mut con, &requests).unwrap();
        assert!(results.into_iter().all(|d| d.unwrap().allowed));
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut con)
            .unwrap();
        let calls = info
            .lines()
            .find_map(|line| line.strip_prefix(stat))
            .and_then(|rest| rest.split(',').next())
            .unwrap_or("0");
        assert_eq!(calls, "1", "{route:?}: {info}");
    }
}

/// The asynchronous batch: one command on a multiplexed connection, a key repeated and a
/// foreign key among them.
#[test]
fn async_batches() {
    let server = Server::start_with_module(false);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut con = server.connection();
    let () = redis::cmd("RPUSH")
        .arg("a:list")
        .arg("x")
        .query(&mut con)
        .map(|_: i64| ())
        .unwrap();
    for route in [Route::Module, Route::Functions] {
        let limiter = RedisLimiter::new(FixedWindow::new(2, SECOND * 3600).unwrap())
            .unwrap()
            .with_prefix(format!("a{route:?}:"))
            .with_route(route)
            .unwrap();
        let list = RedisLimiter::new(FixedWindow::new(2, SECOND * 3600).unwrap())
            .unwrap()
            .with_prefix("a:")
            .with_route(route)
            .unwrap();
        runtime.block_on(async {
            let client = server.client();
            let con = client.get_multiplexed_async_connection().await.unwrap();
            let (k, j) = (Request::new("k"), Request::new("j").cost(3));
            let allowed: Vec<bool> = limiter
                .check_batch_async(&con, &[k, k, k, j])
                .await
                .into_iter()
                .map(|d| d.unwrap().allowed)
                .collect();
            assert_eq!(allowed, [true, true, false, false]);
            let got = list
                .check_batch_async(&con, &[Request::new("list"), Request::new("other")])
                .await;
            assert!(
                matches!(&got[0], Err(Error::Foreign { found, .. }) if found == "list"),
                "{got:?}"
            );
            assert!(got[1].as_ref().unwrap().allowed);
        });
    }
}

/// A batch at the server's time decides all its requests at one time, read once (as the
/// module's does): a fresh bucket's admissions each push its reset exactly one emission
/// interval further, where a time read per request would move between them.
#[test]
fn a_batch_at_the_server_time_is_at_one_time() {
    let server = Server::start_with_module(false);
    let mut con = server.connection();
    let interval = SECOND * 3600;
    let requests = [Request::new("k"); 7];
    for route in [Route::Module, Route::Functions] {
        let limiter = RedisLimiter::new(TokenBucket::new(5, 1, interval).unwrap())
            .unwrap()
            .with_prefix(prefix())
            .with_route(route)
            .unwrap();
        let decisions: Vec<Decision> = limiter
            .check_batch(&mut con, &requests)
            .unwrap()
            .into_iter()
            .map(Result::unwrap)
            .collect();
        let resets: Vec<Ticks> = decisions.iter().map(|d| d.reset_after).collect();
        let allowed: Vec<bool> = decisions.iter().map(|d| d.allowed).collect();
        assert_eq!(
            allowed,
            [true, true, true, true, true, false, false],
            "{route:?}"
        );
        let want: Vec<Ticks> = (1..=5).chain([5, 5]).map(|i| i * interval).collect();
        assert_eq!(resets, want, "{route:?}");
    }
}
