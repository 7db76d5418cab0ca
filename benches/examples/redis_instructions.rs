//! Runs `n` rounds of a Redis client's work against a server at `URL`, to count the
//! client's instructions under callgrind where timings are too noisy (a shared
//! machine; the server is another process, so only the client is counted):
//!
//! ```text
//! cargo build --release -p sluicegate-benches --example redis_instructions
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null \
//!     target/release/examples/redis_instructions redis://127.0.0.1:6391 batch_module 400
//! ```
//!
//! - `batch_module`, `batch_functions`: a `check_batch` of 32 token-bucket decisions on
//!   that route;
//! - `lock_module`, `lock_functions`: 64 lock acquires in one pipeline, then their 64
//!   releases in another (`acquire_batch`, `release_batch`), as the `locks` bench;
//! - `lock_recipe`: the same with the common single-server lock recipe
//!   (`SET NX PX`, a Lua compare-and-delete).
//!
//! The instructions per decision (or acquire + release) are the difference between runs
//! of 400 and 200 rounds, over 200 rounds' worth (which cancels the start-up).

use redis::{Connection, Pipeline};
use sluicegate_benches::{words_and_count, COMPARE_AND_DELETE};
use sluicegate_core::{Concurrency, LeaseRequest, Request, TokenBucket, SECOND};
use sluicegate_redis::{RedisLeases, RedisLimiter, Route};

const BATCH: usize = 32;
const LOCKS: usize = 64;

fn main() {
    let ([url, name], n): (_, usize) =
        words_and_count("redis_instructions URL batch_module|batch_functions N");
    let mut con = redis::Client::open(url)
        .and_then(|client| client.get_connection())
        .expect("a Redis server");
    let route = match name.as_str() {
        "batch_module" | "lock_module" => Route::Module,
        "batch_functions" | "lock_functions" => Route::Functions,
        "lock_recipe" => return recipe(&mut con, n),
        _ => {
            eprintln!("no workload {name}");
            std::process::exit(2);
        }
    };
    if name.starts_with("lock") {
        return locks(&mut con, route, n);
    }
    let limiter = RedisLimiter::new(TokenBucket::new(1_000_000, 1_000_000, SECOND).unwrap())
        .unwrap()
        .with_prefix("instructions:")
        .with_route(route)
        .unwrap();
    let keys: Vec<Vec<u8>> = (0..BATCH)
        .map(|i| format!("user:{i}").into_bytes())
        .collect();
    let requests: Vec<Request> = keys.iter().map(Request::new).collect();
    for _ in 0..n {
        for result in limiter.check_batch(&mut con, &requests).unwrap() {
            assert!(result.unwrap().allowed);
        }
    }
}

fn lock_keys() -> Vec<Vec<u8>> {
    (0..LOCKS)
        .map(|i| format!("instructions:lock:{i}").into_bytes())
        .collect()
}

fn locks(con: &mut Connection, route: Route, n: usize) {
    let leases = RedisLeases::new(Concurrency::lock())
        .with_route(route)
        .unwrap();
    let keys = lock_keys();
    let acquires: Vec<LeaseRequest> = keys
        .iter()
        .map(|k| LeaseRequest::new(k).owner("me").ttl(10 * SECOND))
        .collect();
    for _ in 0..n {
        for result in leases.acquire_batch(con, &acquires).unwrap() {
            assert!(result.unwrap().decision.allowed);
        }
        for result in leases.release_batch(con, &acquires).unwrap() {
            let _released = result.unwrap();
        }
    }
}

fn recipe(con: &mut Connection, n: usize) {
    let script = redis::Script::new(COMPARE_AND_DELETE);
    let () = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(COMPARE_AND_DELETE)
        .query::<String>(con)
        .map(drop)
        .unwrap();
    let keys = lock_keys();
    for _ in 0..n {
        let mut pipe = Pipeline::with_capacity(LOCKS);
        for key in &keys {
            pipe.cmd("SET")
                .arg(key)
                .arg("me")
                .arg("NX")
                .arg("PX")
                .arg(10_000);
        }
        let set: Vec<Option<String>> = pipe.query(con).unwrap();
        assert!(set.iter().all(Option::is_some));
        let mut pipe = Pipeline::with_capacity(LOCKS);
        for key in &keys {
            pipe.cmd("EVALSHA")
                .arg(script.get_hash())
                .arg(1)
                .arg(key)
                .arg("me");
        }
        let deleted: Vec<i64> = pipe.query(con).unwrap();
        assert!(deleted.iter().all(|&d| d == 1));
    }
}
