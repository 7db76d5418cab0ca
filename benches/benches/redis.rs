//! sluicegate-redis beside a plain `INCR` of the same keys on the same local redis-server,
//! in the same run: `INCR` is the floor for a one-key round trip.
//!
//! `redis_pipelined`: pipelines of 64 decisions, one per connection on four threads.
//! `redis_single`: one connection, one decision per round trip.
//!
//! `script_floor` prices what any exact decision script must do, with no math: an
//! `EVALSHA` with the token bucket's six arguments that reads `TIME`, `GET`s the key,
//! `SET`s it with a TTL and returns seven numbers. No script can beat it, so it bounds
//! the ratio to `INCR` a Lua limiter can reach on this server; `function_floor` is the
//! same through `FCALL` of a one-function library.
//!
//! After each function the bench prints the server's own time per call (`INFO
//! commandstats`), which the shared machine's noise moves far less than throughput.
//!
//! `redis_rate_gcra` is go-redis redis_rate's GCRA script (`fixtures/redis_rate_gcra.lua`,
//! its source and licence noted there), by `EVALSHA`. `sluicegate_token_bucket` is the
//! route the client picks (the function library on this server), `sluicegate_evalsha` the
//! script route, chosen: a bucket of 10^6 per second, whose `capacity × period` fits a
//! double (the fast path). `sluicegate_evalsha_general` is the same call on a bucket
//! where it is between 2^52 and 2^53 (1.2 × 10^6 per 4000 s): the general path, in
//! doubles; `sluicegate_evalsha_large` on a bucket of 10^9 per 366 days, beyond 2^53:
//! the general path, its products in limbs.

use sluicegate_test_support as common;

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use redis::{Connection, Pipeline};
use sluicegate_benches::{named_keys, pipelined, BATCH, CONNECTIONS, KEYS};
use sluicegate_core::limits::{MAX_LIMIT, MAX_PERIOD};
use sluicegate_core::{Request, SlidingLog, TokenBucket, SECOND};
use sluicegate_redis::{LuaAlgorithm, RedisLimiter, Route};

fn decide_batch<A: LuaAlgorithm>(
    limiter: &RedisLimiter<A>,
    con: &mut Connection,
    keys: &[Vec<u8>],
    start: usize,
) {
    let requests: Vec<Request> = (0..BATCH)
        .map(|j| Request::new(&keys[(start + j) % KEYS]))
        .collect();
    for result in limiter.check_batch(con, &requests).unwrap() {
        assert!(result.unwrap().allowed);
    }
}

/// A pipeline of checks of `limiter` from a key on, and one check on a key.
fn checks<'a>(
    limiter: &'a RedisLimiter<TokenBucket>,
    keys: &'a [Vec<u8>],
) -> (
    impl Fn(&mut Connection, usize) + Sync + 'a,
    impl Fn(&mut Connection, usize) + 'a,
) {
    (
        move |con: &mut Connection, start| decide_batch(limiter, con, keys, start),
        move |con: &mut Connection, i: usize| {
            black_box(limiter.check(con, &keys[i], 1).unwrap().allowed);
        },
    )
}

/// The floor script: the Redis calls and reply of a decision, without its arithmetic.
const FLOOR: &str = "local t = redis.call('TIME')
redis.call('GET', KEYS[1])
redis.call('SET', KEYS[1], 'sluicegate', 'PX', 1000)
return { 1, 0, 0, 0, 0, 0, tonumber(t[1]) }";

/// The floor as a function library: the same calls and reply, through `FCALL`.
const FUNCTION_FLOOR: &str = "#!lua name=bench_floor
redis.register_function('bench_floor', function(keys, args)
  local t = redis.call('TIME')
  redis.call('GET', keys[1])
  redis.call('SET', keys[1], 'sluicegate', 'PX', 1000)
  return { 1, 0, 0, 0, 0, 0, tonumber(t[1]) }
end)";

/// An `EVALSHA` of the floor script with the arguments of a token bucket decision: the
/// mode, time, cost, wait, name and the 56 bytes of the bucket's numbers.
fn floor_call(sha: &str, key: &[u8]) -> redis::Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(sha)
        .arg(1)
        .arg(key)
        .arg("decide")
        .arg("")
        .arg(1)
        .arg("");
    cmd.arg("token_bucket").arg(&[7u8; 56][..]);
    cmd
}

/// The floor's call, by `EVALSHA` of `sha`, or by `FCALL` with `sha` empty.
fn floor_call_on(sha: &str, key: &[u8]) -> redis::Cmd {
    let mut cmd = floor_call(sha, key);
    if sha.is_empty() {
        let mut fcall = redis::cmd("FCALL");
        fcall.arg("bench_floor");
        for arg in cmd.args_iter().skip(2) {
            if let redis::Arg::Simple(bytes) = arg {
                fcall.arg(bytes);
            }
        }
        cmd = fcall;
    }
    cmd
}

fn floor_batch(sha: &str, con: &mut Connection, keys: &[Vec<u8>], start: usize) {
    let mut pipe = Pipeline::with_capacity(BATCH);
    for j in 0..BATCH {
        pipe.add_command(floor_call_on(sha, &keys[(start + j) % KEYS]));
    }
    let _: Vec<Vec<i64>> = pipe.query(con).unwrap();
}

/// go-redis redis_rate's GCRA script (allowN).
const REDIS_RATE: &str = include_str!("../fixtures/redis_rate_gcra.lua");

/// redis_rate's call for one request: a burst of 10^6 refilled at 10^6 per second.
fn redis_rate_call(sha: &str, key: &[u8]) -> redis::Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(sha).arg(1).arg(key);
    cmd.arg(1_000_000).arg(1_000_000).arg(1).arg(1);
    cmd
}

fn redis_rate_batch(sha: &str, con: &mut Connection, keys: &[Vec<u8>], start: usize) {
    let mut pipe = Pipeline::with_capacity(BATCH);
    for j in 0..BATCH {
        pipe.add_command(redis_rate_call(sha, &keys[(start + j) % KEYS]));
    }
    let replies: Vec<(i64, i64, String, String)> = pipe.query(con).unwrap();
    assert!(replies.iter().all(|r| r.0 == 1));
}

fn incr_batch(con: &mut Connection, keys: &[Vec<u8>], start: usize) {
    let mut pipe = Pipeline::with_capacity(BATCH);
    for j in 0..BATCH {
        pipe.incr(&keys[(start + j) % KEYS], 1);
    }
    let _: Vec<i64> = pipe.query(con).unwrap();
}

/// Prints the server's own time per call of `command` (`INFO commandstats`) since the
/// last call, then resets the counters: what each function costs Redis, apart from the
/// round trips and the client.
fn server_time(server: &common::Server, function: &str, command: &str) {
    let mut con = server.connection();
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut con)
        .unwrap();
    let prefix = format!("cmdstat_{command}:");
    if let Some(line) = info.lines().find(|l| l.starts_with(&prefix)) {
        let usec = line
            .split(',')
            .find_map(|f| f.strip_prefix("usec_per_call="));
        eprintln!(
            "server time {function}: {} µs per {command}",
            usec.unwrap_or("?")
        );
    }
    let () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut con)
        .unwrap();
}

fn redis_benches(c: &mut Criterion) {
    let server = common::Server::start();
    let keys = named_keys("user:");
    // The floor's keys hold strings, so they must not be the ones `INCR` counts.
    let floor_keys = named_keys("floor:user:");
    // Mostly admitted: a bucket of 10^6 refilled at 10^6/s, a log of 1000 per second.
    let bucket = RedisLimiter::new(TokenBucket::new(1_000_000, 1_000_000, SECOND).unwrap())
        .unwrap()
        .with_prefix("tb:");
    let evalsha = RedisLimiter::new(TokenBucket::new(1_000_000, 1_000_000, SECOND).unwrap())
        .unwrap()
        .with_prefix("tbs:")
        .with_route(Route::Scripts)
        .unwrap();
    let general = RedisLimiter::new(TokenBucket::new(1_200_000, 1_200_000, 4000 * SECOND).unwrap())
        .unwrap()
        .with_prefix("tbg:")
        .with_route(Route::Scripts)
        .unwrap();
    let large = RedisLimiter::new(TokenBucket::new(MAX_LIMIT, MAX_LIMIT, MAX_PERIOD).unwrap())
        .unwrap()
        .with_prefix("tbl:")
        .with_route(Route::Scripts)
        .unwrap();
    let rate_keys = named_keys("rr:user:");
    let log = RedisLimiter::new(SlidingLog::new(1000, SECOND).unwrap())
        .unwrap()
        .with_prefix("log:");
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(FLOOR)
        .query(&mut server.connection())
        .unwrap();
    let rate_sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(REDIS_RATE)
        .query(&mut server.connection())
        .unwrap();
    let _: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg(FUNCTION_FLOOR)
        .query(&mut server.connection())
        .unwrap();
    // Loads the library, so no measured call pays for it.
    assert!(
        bucket
            .check(&mut server.connection(), b"warm", 1)
            .unwrap()
            .allowed
    );
    assert_eq!(bucket.route(), Some(Route::Functions));

    // Each bucket's pipeline of checks and single check.
    let buckets = [
        ("sluicegate_token_bucket", "fcall", &bucket),
        ("sluicegate_evalsha", "evalsha", &evalsha),
        ("sluicegate_evalsha_general", "evalsha", &general),
        ("sluicegate_evalsha_large", "evalsha", &large),
    ]
    .map(|(name, command, limiter)| (name, command, checks(limiter, &keys)));
    // Each case: its name, the command whose server time it reports, one pipeline of
    // calls from a key on, and one call on a key (the single group leaves the log out).
    type Pipelined<'a> = &'a (dyn Fn(&mut Connection, usize) + Sync);
    type Single<'a> = Option<&'a dyn Fn(&mut Connection, usize)>;
    let others: [(&str, &str, Pipelined, Single); 5] = [
        (
            "redis_rate_gcra",
            "evalsha",
            &|con, start| redis_rate_batch(&rate_sha, con, &rate_keys, start),
            Some(&|con, i| {
                let reply: (i64, i64, String, String) = redis_rate_call(&rate_sha, &rate_keys[i])
                    .query(con)
                    .unwrap();
                black_box(reply);
            }),
        ),
        (
            "sluicegate_sliding_log",
            "fcall",
            &|con, start| decide_batch(&log, con, &keys, start),
            None,
        ),
        (
            "script_floor",
            "evalsha",
            &|con, start| floor_batch(&sha, con, &floor_keys, start),
            Some(&|con, i| {
                black_box(
                    floor_call(&sha, &floor_keys[i])
                        .query::<Vec<i64>>(con)
                        .unwrap(),
                );
            }),
        ),
        (
            "function_floor",
            "fcall",
            &|con, start| floor_batch("", con, &floor_keys, start),
            Some(&|con, i| {
                black_box(
                    floor_call_on("", &floor_keys[i])
                        .query::<Vec<i64>>(con)
                        .unwrap(),
                );
            }),
        ),
        (
            "incr",
            "incr",
            &|con, start| incr_batch(con, &keys, start),
            Some(&|con, i| {
                black_box(redis::cmd("INCR").arg(&keys[i]).query::<i64>(con).unwrap());
            }),
        ),
    ];
    let cases: Vec<(&str, &str, Pipelined, Single)> = buckets
        .iter()
        .map(|(name, command, (batch, call))| {
            let call: &dyn Fn(&mut Connection, usize) = call;
            (*name, *command, batch as Pipelined, Some(call))
        })
        .chain(others)
        .collect();

    // Counters from zero for the first function.
    server_time(&server, "", "");
    let mut group = c.benchmark_group("redis_pipelined");
    group.throughput(Throughput::Elements(BATCH as u64));
    for &(name, command, batch, _) in &cases {
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let connections = (0..CONNECTIONS).map(|_| server.connection()).collect();
                pipelined(connections, iters, batch)
            })
        });
        server_time(&server, name, command);
    }
    group.finish();

    let mut group = c.benchmark_group("redis_single");
    group.throughput(Throughput::Elements(1));
    let mut con = server.connection();
    let mut i = 0;
    for &(name, command, _, call) in &cases {
        let Some(call) = call else { continue };
        group.bench_function(name, |b| {
            b.iter(|| {
                i = (i + 1) % KEYS;
                call(&mut con, i);
            })
        });
        server_time(&server, name, command);
    }
    group.finish();
}

criterion_group!(benches, redis_benches);
criterion_main!(benches);
