//! Benchmarks live in `benches/`; this library holds what several of them share.

use std::time::{Duration, Instant};

/// Runs `iters` rounds split over one thread per connection, calling
/// `run(thread, connection, rounds)` once in each, and returns the wall time: the shape
/// of every pipelined Redis bench.
pub fn on_threads<C: Send>(
    mut connections: Vec<C>,
    iters: u64,
    run: impl Fn(usize, &mut C, u64) + Sync,
) -> Duration {
    let rounds = iters.div_ceil(connections.len().max(1) as u64);
    let started = Instant::now();
    std::thread::scope(|scope| {
        for (thread, con) in connections.iter_mut().enumerate() {
            let run = &run;
            scope.spawn(move || run(thread, con, rounds));
        }
    });
    started.elapsed()
}

/// Step `step` of a fixed pseudo-random walk over `keys` keys (at least one), the same for
/// every limiter: computed rather than read from a table, so that walking adds no memory
/// traffic to the limiter's own (the `memory` bench, the `contend` program and the
/// `memory_instructions` example).
#[inline]
pub fn walk(step: u64, keys: u64) -> u64 {
    let mut x = 0x9E37_79B9_7F4A_7C15 ^ step.wrapping_mul(0xA24B_AED4_963E_E407);
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    x % keys.max(1)
}

/// The common single-server lock recipe's release: delete the key only if it still holds the
/// owner's value (the `locks` bench and the `redis_instructions` example).
pub const COMPARE_AND_DELETE: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0";

/// Time for `iters` calls of `call` split over two threads at once: a limiter or a lease
/// table under contention (the `memory` and `lease` benches).
pub fn on_two_threads(iters: u64, call: &(impl Fn() -> bool + Sync)) -> Duration {
    let start = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                for _ in 0..iters / 2 {
                    std::hint::black_box(call());
                }
            });
        }
    });
    start.elapsed()
}

/// Keys a Redis bench spreads its calls over.
pub const KEYS: usize = 1024;
/// Calls in one pipeline of a pipelined Redis bench.
pub const BATCH: usize = 64;
/// Connections of a pipelined Redis bench, one thread each.
pub const CONNECTIONS: usize = 4;

/// The [`KEYS`] key names `{prefix}{i}`.
pub fn named_keys(prefix: &str) -> Vec<Vec<u8>> {
    (0..KEYS)
        .map(|i| format!("{prefix}{i}").into_bytes())
        .collect()
}

/// Runs `iters` pipelines over the `connections` (see [`on_threads`]), calling
/// `batch(connection, start)` for the [`BATCH`] keys from `start` on, each thread
/// starting at its own place and moving on a batch each round; returns the wall time.
pub fn pipelined<C: Send>(
    connections: Vec<C>,
    iters: u64,
    batch: impl Fn(&mut C, usize) + Sync,
) -> Duration {
    on_threads(connections, iters, |t, con, rounds| {
        let mut start = t * 7919;
        for _ in 0..rounds {
            start = (start + BATCH) % KEYS;
            batch(con, start);
        }
    })
}

/// An example's arguments: `N` words, then a count. Prints `usage` and exits with 2 when
/// they are not there.
pub fn words_and_count<const N: usize, T: std::str::FromStr>(usage: &str) -> ([String; N], T) {
    let mut args = std::env::args().skip(1);
    let words: Vec<String> = args.by_ref().take(N).collect();
    let count = args.next().and_then(|n| n.parse().ok());
    match (<[String; N]>::try_from(words), count) {
        (Ok(words), Some(count)) => (words, count),
        _ => {
            eprintln!("usage: {usage}");
            std::process::exit(2);
        }
    }
}
