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

/// Seed 004's lock release, the recipe's: delete the key only if it still holds the
/// owner's value (the `locks` bench and the `redis_instructions` example).
pub const COMPARE_AND_DELETE: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0";
