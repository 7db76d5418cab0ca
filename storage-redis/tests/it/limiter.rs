//! The host contract over Redis: `sluicegate_core::Limiter` on [`Connected`] and
//! `sluicegate_core::AsyncLimiter` on [`ConnectedAsync`] answer exactly as the inherent
//! methods taking a connection, on a real `redis-server`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use proptest::prelude::*;
use proptest::test_runner::TestRunner;
use redis::aio::MultiplexedConnection;
use redis::{Commands, Connection};
use sluicegate_core::{
    AnyAlgorithm, AsyncLimiter, AsyncReporter, Ban, Composite, Decision, FixedWindow, Limiter,
    Pacing, ReportRequest, Reporter, Request, Reserve, SlidingLog, Ticks, TokenBucket, MAX_TICKS,
    SECOND,
};
use sluicegate_redis::{
    Connected, ConnectedAsync, Error, LuaAlgorithm, Reconnecting, RedisLimiter, Route,
    MAX_LUA_TICKS,
};
use sluicegate_test_support::ops::{op, Op};

use crate::common::{self, Server};

/// Around 2026 in µs since the Unix epoch.
const EPOCH: Ticks = 1_790_000_000_000_000;

/// The three ways of calling one limiter, each on its own prefix of one server.
struct Hosts<A: LuaAlgorithm> {
    contract: Connected<RedisLimiter<A>>,
    inherent: RedisLimiter<A>,
    con: Connection,
    asynchronous: ConnectedAsync<RedisLimiter<A>, MultiplexedConnection>,
    runtime: tokio::runtime::Runtime,
}

impl<A: LuaAlgorithm + Reserve + Clone + Sync> Hosts<A>
where
    A::State: Send + Sync,
{
    fn new(server: &Server, alg: A) -> Self {
        static CASE: AtomicU64 = AtomicU64::new(0);
        let case = CASE.fetch_add(1, Ordering::Relaxed);
        let limiter = |name: &str| {
            RedisLimiter::new(alg.clone())
                .unwrap()
                .with_prefix(format!("case{case}:{name}:"))
        };
        let (runtime, multiplexed) = server.multiplexed();
        Self {
            contract: Connected::new(limiter("t"), Reconnecting::new(server.client())),
            inherent: limiter("i"),
            con: server.connection(),
            asynchronous: ConnectedAsync::new(limiter("a"), multiplexed),
            runtime,
        }
    }

    /// `op` for `request` three ways: through the trait, the inherent method taking a
    /// connection, and the asynchronous trait; `None` for a reset.
    fn run(&mut self, op: &Op, request: &Request<'_>) -> Option<[Result<Decision, Error>; 3]> {
        let key = request.key;
        let (con, host) = (&mut self.con, &self.asynchronous);
        Some(match *op {
            Op::Check => [
                self.contract.check(request),
                self.inherent.check_request(con, request),
                self.runtime.block_on(AsyncLimiter::check(host, request)),
            ],
            Op::Peek => [
                self.contract.peek(request),
                self.inherent.peek(con, request),
                self.runtime.block_on(AsyncLimiter::peek(host, request)),
            ],
            Op::Reserve(wait) => [
                self.contract.reserve(request, wait),
                self.inherent.reserve(con, request, wait),
                self.runtime
                    .block_on(AsyncLimiter::reserve(host, request, wait)),
            ],
            Op::Reset => {
                Limiter::reset(&self.contract, key).unwrap();
                self.inherent.reset(con, key).unwrap();
                self.runtime
                    .block_on(AsyncLimiter::reset(host, key))
                    .unwrap();
                return None;
            }
        })
    }

    /// The values each host stored for `key`.
    fn stored(&mut self, key: &[u8]) -> [Vec<Option<Vec<u8>>>; 3] {
        [
            self.contract.host(),
            &self.inherent,
            self.asynchronous.host(),
        ]
        .map(|limiter| {
            let keys = limiter.redis_keys(key).unwrap();
            keys.iter().map(|k| self.con.get(k).unwrap()).collect()
        })
    }
}

/// Runs `steps` (a gap, an operation, a cost, a key) from `EPOCH` through [`Hosts`]:
/// every answer the same three ways, and the same values stored after each step.
fn same_three_ways<A: LuaAlgorithm + Reserve + Clone + Sync>(
    server: &Server,
    alg: A,
    steps: &[(Ticks, Op, u64, u8)],
) -> Result<(), TestCaseError>
where
    A::State: Send + Sync,
{
    let mut hosts = Hosts::new(server, alg);
    let mut now = EPOCH;
    for (gap, op, cost, key) in steps {
        now += gap;
        let key = [*key];
        let request = Request::new(&key).cost(*cost).at(now);
        if let Some([contract, inherent, asynchronous]) = hosts.run(op, &request) {
            let (contract, inherent) = (contract.unwrap(), inherent.unwrap());
            prop_assert_eq!(&contract, &inherent, "{:?} at {}", op, now);
            prop_assert_eq!(&asynchronous.unwrap(), &inherent, "{:?} at {}", op, now);
        }
        let [contract, inherent, asynchronous] = hosts.stored(&key);
        prop_assert_eq!(&contract, &inherent);
        prop_assert_eq!(&asynchronous, &inherent);
    }
    Ok(())
}

fn steps() -> impl Strategy<Value = Vec<(Ticks, Op, u64, u8)>> {
    prop::collection::vec((0..SECOND, op(), 0..8u64, 0..3u8), 1..40)
}

#[test]
fn the_trait_and_the_async_forms_answer_as_the_inherent_methods() {
    let server = Server::start();
    let mut runner = TestRunner::new(ProptestConfig::with_cases(16));
    let strategy = (1..10u64, 1..10u64, steps());
    let result = runner.run(&strategy, |(limit, rate, steps)| {
        let bucket = TokenBucket::new(limit, rate, SECOND).unwrap();
        same_three_ways(&server, bucket, &steps)?;
        same_three_ways(&server, Pacing::new(limit, rate, SECOND).unwrap(), &steps)?;
        // Windows cannot book ahead: through `AnyAlgorithm`, a reserve decides.
        let window = FixedWindow::new(limit, SECOND).unwrap();
        same_three_ways(&server, AnyAlgorithm::from(window), &steps)?;
        let log = SlidingLog::new(limit, SECOND).unwrap();
        same_three_ways(&server, AnyAlgorithm::from(log), &steps)?;
        let long = TokenBucket::new(3 * limit, rate, 10 * SECOND).unwrap();
        same_three_ways(&server, Composite::new(vec![bucket, long]).unwrap(), &steps)?;
        let ban = Ban::new(AnyAlgorithm::from(bucket), 3, SECOND, SECOND).unwrap();
        same_three_ways(&server, AnyAlgorithm::from(ban), &steps)
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

/// Without its own time a request is decided at the server's: within one window of an
/// hour, the same figures as the inherent `check`, and a peek sees what the checks left.
#[test]
fn a_request_without_a_time_is_decided_at_the_servers() {
    let server = Server::start();
    let window = || AnyAlgorithm::from(FixedWindow::new(5, 3600 * SECOND).unwrap());
    let host = Connected::new(
        RedisLimiter::new(window()).unwrap().with_prefix("t:"),
        Reconnecting::new(server.client()),
    );
    let inherent = RedisLimiter::new(window()).unwrap().with_prefix("i:");
    let mut con = server.connection();
    let request = Request::new("k").cost(2);
    for _ in 0..3 {
        let (got, want) = (
            host.check(&request).unwrap(),
            inherent.check(&mut con, b"k", 2).unwrap(),
        );
        assert_eq!((got.allowed, got.remaining), (want.allowed, want.remaining));
    }
    let peek = host.peek(&Request::new("k").cost(1)).unwrap();
    assert_eq!((peek.allowed, peek.remaining), (true, 0));
    let reserved = host.reserve(&Request::new("k"), SECOND).unwrap();
    assert_eq!((reserved.allowed, reserved.remaining), (true, 0));
    assert!(!host.peek(&Request::new("k")).unwrap().allowed);
}

/// A time beyond the scripts' range is refused by every operation, before any call:
/// beyond the core's last instant, or a sliding log's beyond 2^52, its error naming
/// the alternatives.
#[test]
fn a_time_beyond_the_scripts_range_is_a_typed_error() {
    let server = Server::start();
    fn refused<A: LuaAlgorithm + Reserve>(server: &Server, alg: A, max: Ticks) -> &'static str {
        let host = Connected::new(
            RedisLimiter::new(alg).unwrap(),
            Reconnecting::new(server.client()),
        );
        let mut why = "";
        for late in [max + 1, Ticks::MAX] {
            let request = Request::new("k").at(late);
            for result in [
                host.check(&request),
                host.peek(&request),
                host.reserve(&request, 0),
            ] {
                match result {
                    Err(Error::OutOfRange {
                        what: "now",
                        value,
                        max: got,
                        reason,
                    }) => {
                        assert_eq!((value, got), (late, max));
                        why = reason;
                    }
                    other => panic!("expected a time error, got {other:?}"),
                }
            }
        }
        why
    }
    refused(&server, TokenBucket::new(5, 1, SECOND).unwrap(), MAX_TICKS);
    let log = AnyAlgorithm::SlidingLog(SlidingLog::new(5, SECOND).unwrap());
    let why = refused(&server, log.clone(), MAX_LUA_TICKS);
    assert!(
        why.contains("sliding counter") && why.contains("module"),
        "{why}"
    );
    // A log anywhere in a limit bounds its time.
    let banned_log = Ban::new(log, 3, SECOND, SECOND).unwrap();
    let window = AnyAlgorithm::FixedWindow(FixedWindow::new(5, SECOND).unwrap());
    let members = vec![AnyAlgorithm::Ban(Box::new(banned_log)), window];
    let composite = AnyAlgorithm::Composite(Composite::new(members).unwrap());
    refused(&server, composite, MAX_LUA_TICKS);
    assert_eq!(
        redis::cmd("DBSIZE")
            .query::<u64>(&mut server.connection())
            .unwrap(),
        0
    );
}

/// With no server, every operation is a typed error a fail policy can act on.
#[test]
fn an_unreachable_server_is_unavailable() {
    let client =
        redis::Client::open(format!("redis://127.0.0.1:{}/", common::free_port())).unwrap();
    let host = Connected::new(
        RedisLimiter::new(TokenBucket::new(5, 1, SECOND).unwrap()).unwrap(),
        Reconnecting::new(client),
    );
    let request = Request::new("k");
    assert!(host.check(&request).unwrap_err().is_unavailable());
    assert!(host.peek(&request).unwrap_err().is_unavailable());
    assert!(host.reserve(&request, SECOND).unwrap_err().is_unavailable());
    assert!(Limiter::reset(&host, b"k").unwrap_err().is_unavailable());
}

/// `Reporter` and `AsyncReporter` answer as the inherent `report`, and store the same.
#[test]
fn reports_through_the_traits_answer_as_the_inherent_method() {
    let server = Server::start();
    let bucket = TokenBucket::new(5, 1, SECOND)
        .unwrap()
        .with_overdraft(3)
        .unwrap();
    let mut hosts = Hosts::new(&server, bucket);
    for (i, adjust) in [2, 7, -1, 0, -20, 4].into_iter().enumerate() {
        let request = ReportRequest::new("k")
            .adjust(adjust)
            .at(EPOCH + i as Ticks * 100_000);
        let inherent = hosts.inherent.report(&mut hosts.con, &request).unwrap();
        assert_eq!(hosts.contract.report(&request).unwrap(), inherent);
        let asynchronous = &hosts.asynchronous;
        let got = hosts
            .runtime
            .block_on(AsyncReporter::report(asynchronous, &request));
        assert_eq!(got.unwrap(), inherent);
        let [contract, inherent, asynchronous] = hosts.stored(b"k");
        assert_eq!((&contract, &asynchronous), (&inherent, &inherent));
    }
}

/// The time of a report and of a check at the server's time on loopback, as the client
/// sees it, on each route: the mean of 2000 calls after 200 to warm up.
#[test]
#[ignore = "a measurement: cargo test -p sluicegate-redis --test it report_time -- --ignored --nocapture"]
fn report_time() {
    let server = Server::start_with_module(false);
    let mut con = server.connection();
    let bucket = TokenBucket::new(1_000_000, 1_000_000, SECOND)
        .unwrap()
        .with_overdraft(1000)
        .unwrap();
    for route in [Route::Module, Route::Functions, Route::Scripts] {
        let limiter = RedisLimiter::new(bucket)
            .unwrap()
            .with_route(route)
            .unwrap();
        let mean = |con: &mut Connection, call: &dyn Fn(&mut Connection, i64)| {
            for i in 0..200 {
                call(con, i);
            }
            let started = Instant::now();
            for i in 0..2000 {
                call(con, i);
            }
            started.elapsed().as_secs_f64() * 1e6 / 2000.0
        };
        let check = mean(&mut con, &|con, _| {
            let _ = limiter.check(con, b"k", 1).unwrap();
        });
        let report = mean(&mut con, &|con, i| {
            let adjust = if i % 2 == 0 { 3 } else { -2 };
            limiter
                .report(con, &ReportRequest::new(b"k").adjust(adjust))
                .unwrap();
        });
        println!("{route:?}: check {check:.1} µs, report {report:.1} µs");
    }
}
