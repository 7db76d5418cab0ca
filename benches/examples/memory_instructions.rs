//! Runs `n` decisions of one limiter of the `memory` bench, to count their instructions
//! under callgrind where timings are too noisy (a shared machine):
//!
//! ```text
//! cargo build --release -p sluicegate-benches --example memory_instructions
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null --collect-atstart=no \
//!     --toggle-collect='*memory_instructions::measured*' \
//!     target/release/examples/memory_instructions sluicegate_direct 200000
//! ```
//!
//! The instructions per decision are the difference between runs of 200 000 and
//! 100 000 decisions, over 100 000. The keyed limiters are filled with the bench's
//! 100 000 keys before the count, as in the bench.
//!
//! `race_direct`, `race_keyed` and `race_clock` time sluicegate and governor in one process
//! instead, in alternating blocks of `N` decisions (`race_direct 500000`): the fastest
//! blocks of each are the least disturbed by other work on a shared machine, so their
//! ratio repeats where two separate timings do not.

use std::hint::black_box;
use std::num::NonZeroU32;

use governor::clock::{Clock as _, QuantaClock};
use governor::{Quota, RateLimiter};
use sluicegate_benches::{walk, words_and_count};
use sluicegate_core::memory::{DirectLimiter, KeyedLimiter};
use sluicegate_core::{Clock, MonotonicClock, TokenBucket, SECOND};

const KEYS: u64 = 100_000;

fn quota(rate: u32) -> Quota {
    Quota::per_second(NonZeroU32::new(rate).unwrap())
}

fn bucket(rate: u32) -> TokenBucket {
    TokenBucket::new(rate.into(), rate.into(), SECOND).unwrap()
}

/// The key of step `i`: the bench's walk over its keys.
fn key(i: u32) -> u64 {
    walk(i.into(), KEYS)
}

fn main() {
    let ([name], n): (_, u32) = words_and_count(
        "memory_instructions sluicegate_direct|governor_direct|sluicegate_keyed|governor_keyed|sluicegate_clock|governor_clock|race_direct|race_keyed|race_clock N",
    );
    match name.as_str() {
        "race_direct" => {
            let sluicegate = DirectLimiter::new(bucket(1_000_000_000));
            let governor = RateLimiter::direct(quota(1_000_000_000));
            race(
                n,
                |_| {
                    black_box(sluicegate.check(1).allowed);
                },
                |_| {
                    black_box(governor.check().is_ok());
                },
            );
        }
        "race_clock" => {
            let sluicegate = MonotonicClock::new();
            let governor = QuantaClock::default();
            race(
                n,
                |_| {
                    black_box(sluicegate.now());
                },
                |_| {
                    black_box(governor.now());
                },
            );
        }
        "race_keyed" => {
            let sluicegate = KeyedLimiter::new(bucket(1_000), 200_000);
            let governor = RateLimiter::keyed(quota(1_000));
            (0..KEYS).for_each(|k| {
                assert!(sluicegate.check(&k, 1).allowed);
                assert!(governor.check_key(&k).is_ok());
            });
            race(
                n,
                |i| {
                    black_box(sluicegate.check(&key(i), 1).allowed);
                },
                |i| {
                    black_box(governor.check_key(&key(i)).is_ok());
                },
            );
        }
        "sluicegate_direct" => {
            let limiter = DirectLimiter::new(bucket(1_000_000_000));
            measured(n, |_| assert!(limiter.check(1).allowed));
        }
        "governor_direct" => {
            let limiter = RateLimiter::direct(quota(1_000_000_000));
            measured(n, |_| assert!(limiter.check().is_ok()));
        }
        "sluicegate_keyed" => {
            let limiter = KeyedLimiter::new(bucket(1_000), 200_000);
            (0..KEYS).for_each(|k| assert!(limiter.check(&k, 1).allowed));
            measured(n, |i| {
                black_box(limiter.check(&key(i), 1).allowed);
            });
        }
        "governor_keyed" => {
            let limiter = RateLimiter::keyed(quota(1_000));
            (0..KEYS).for_each(|k| assert!(limiter.check_key(&k).is_ok()));
            measured(n, |i| {
                black_box(limiter.check_key(&key(i)).is_ok());
            });
        }
        "sluicegate_clock" => {
            let clock = MonotonicClock::new();
            measured(n, |_| {
                black_box(clock.now());
            });
        }
        "governor_clock" => {
            let clock = QuantaClock::default();
            measured(n, |_| {
                black_box(clock.now());
            });
        }
        _ => {
            eprintln!("no limiter {name}");
            std::process::exit(2);
        }
    }
}

/// The `n` decisions callgrind counts (its `--toggle-collect`).
#[inline(never)]
fn measured(n: u32, mut decide: impl FnMut(u32)) {
    for i in 0..n {
        decide(i);
    }
}

/// Alternates blocks of `n` decisions of each, 40 rounds, and prints the fastest and
/// the median block of each in ns per decision: the fastest blocks are the least
/// disturbed by other work on a shared machine.
fn race(n: u32, mut sluicegate: impl FnMut(u32), mut governor: impl FnMut(u32)) {
    let mut times = [Vec::new(), Vec::new()];
    for _ in 0..40 {
        times[0].push(block(n, &mut sluicegate));
        times[1].push(block(n, &mut governor));
    }
    for t in &mut times {
        t.sort_by(f64::total_cmp);
    }
    println!(
        "sluicegate min {:.1} med {:.1} | governor min {:.1} med {:.1} | ratio min {:.2} med {:.2}",
        times[0][0],
        times[0][20],
        times[1][0],
        times[1][20],
        times[0][0] / times[1][0],
        times[0][20] / times[1][20]
    );
}

/// `n` decisions in a tight loop, as criterion's `iter` runs them, in ns per decision.
#[inline(never)]
fn block(n: u32, decide: &mut impl FnMut(u32)) -> f64 {
    let start = std::time::Instant::now();
    for i in 0..n {
        decide(i);
    }
    start.elapsed().as_secs_f64() * 1e9 / f64::from(n)
}
