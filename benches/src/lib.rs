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

/// Seed 004's lock release, the recipe's: delete the key only if it still holds the
/// owner's value (the `locks` bench and the `redis_instructions` example).
pub const COMPARE_AND_DELETE: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0";
