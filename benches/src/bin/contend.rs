//! sluicegate beside governor under contention: `--threads N` threads decide as fast as
//! they can for `--seconds S` on one key (the direct limiters) or on `--keys K` keys (the
//! keyed limiters, each thread walking the keys in its own pseudo-random order), with
//! limits high enough never to deny. Prints one line per limiter, in million decisions
//! per second, and for sluicegate's direct limiter the compare-and-swaps retried (a lower
//! bound, see `DirectLimiter::retries`).
//!
//! The two limiters take turns, in five rounds of a fifth of `S` each, and each line
//! gives the median round: on a shared machine, other work slows whichever limiter runs
//! at that moment, and turns spread it over both. A keyed limiter holds twice the keys
//! walked, the headroom of the criterion bench's `memory_keyed`.
//!
//! ```sh
//! cargo run --release -p sluicegate-benches --bin contend -- --threads 8 --keys 100000 --seconds 5
//! ```

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use governor::{Quota, RateLimiter};
use sluicegate_benches::walk;
use sluicegate_core::memory::{DirectLimiter, KeyedLimiter};
use sluicegate_core::{TokenBucket, SECOND};

/// A billion per second, per key: never denied at these speeds.
const RATE: u32 = 1_000_000_000;

struct Args {
    threads: usize,
    keys: u64,
    seconds: f64,
}

fn parse() -> Result<Args, String> {
    let mut args = Args {
        threads: 1,
        keys: 1,
        seconds: 3.0,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        let bad = |e: &dyn std::fmt::Display| format!("{flag} {value}: {e}");
        match flag.as_str() {
            "--threads" => args.threads = value.parse().map_err(|e| bad(&e))?,
            "--keys" => args.keys = value.parse().map_err(|e| bad(&e))?,
            "--seconds" => args.seconds = value.parse().map_err(|e| bad(&e))?,
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    if args.threads == 0 || args.keys == 0 || args.seconds.is_nan() || args.seconds <= 0.0 {
        return Err("threads, keys and seconds must be positive".into());
    }
    Ok(args)
}

/// Rounds each limiter runs, taking turns.
const ROUNDS: u32 = 5;

/// Runs `decide(thread, i)` on every thread for `seconds`; returns million decisions per
/// second and the decisions made.
fn run(args: &Args, seconds: f64, decide: &(impl Fn(usize, u64) -> bool + Sync)) -> (f64, u64) {
    let stop = AtomicBool::new(false);
    let started = Instant::now();
    let total: u64 = std::thread::scope(|s| {
        let handles: Vec<_> = (0..args.threads)
            .map(|thread| {
                let stop = &stop;
                s.spawn(move || {
                    let mut done = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        for _ in 0..256 {
                            black_box(decide(thread, done));
                            done += 1;
                        }
                    }
                    done
                })
            })
            .collect();
        std::thread::sleep(Duration::from_secs_f64(seconds));
        stop.store(true, Ordering::Relaxed);
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    (total as f64 / started.elapsed().as_secs_f64() / 1e6, total)
}

/// The `i`-th key of `thread`'s walk over `keys` keys: the bench's walk, each thread
/// from its own start, so limiters visit the same keys in the same order.
fn key(thread: usize, i: u64, keys: u64) -> u64 {
    walk(i.wrapping_add(thread as u64 * 0x9E37_79B9), keys)
}

fn main() {
    let args = match parse() {
        Ok(args) => args,
        Err(e) => {
            eprintln!("contend: {e}\nusage: contend --threads N --keys K --seconds S");
            std::process::exit(2);
        }
    };
    let bucket = TokenBucket::new(RATE.into(), RATE.into(), SECOND).expect("valid bucket");
    let quota = Quota::per_second(NonZeroU32::new(RATE).expect("nonzero"));
    let (threads, keys) = (args.threads, args.keys);
    let line = |name: &str, rate: f64, extra: String| {
        println!("{name:<9} threads={threads:<3} keys={keys:<7} {rate:>7.2} M decisions/s{extra}");
    };
    if keys == 1 {
        let sluicegate = DirectLimiter::new(bucket);
        let governor = RateLimiter::direct(quota);
        let (rates, decisions) = turns(&args, &|_, _| sluicegate.check(1).allowed, &|_, _| {
            governor.check().is_ok()
        });
        let retries = sluicegate.retries();
        line(
            "sluicegate",
            rates[0],
            format!(
                "  ({retries} CAS retries, {:.3} per decision)",
                retries as f64 / decisions as f64
            ),
        );
        line("governor", rates[1], String::new());
    } else {
        let capacity = usize::try_from(keys)
            .unwrap_or(usize::MAX)
            .saturating_mul(2);
        let sluicegate = KeyedLimiter::new(bucket, capacity);
        let governor = RateLimiter::keyed(quota);
        let (rates, _) = turns(
            &args,
            &|t, i| sluicegate.check(&key(t, i, keys), 1).allowed,
            &|t, i| governor.check_key(&key(t, i, keys)).is_ok(),
        );
        line("sluicegate", rates[0], String::new());
        line("governor", rates[1], String::new());
    }
}

/// The median round's rate of each of `sluicegate` and `governor`, running in turns, and
/// sluicegate's decisions in all rounds.
fn turns(
    args: &Args,
    sluicegate: &(impl Fn(usize, u64) -> bool + Sync),
    governor: &(impl Fn(usize, u64) -> bool + Sync),
) -> ([f64; 2], u64) {
    let seconds = args.seconds / f64::from(ROUNDS);
    let mut rates = [Vec::new(), Vec::new()];
    let mut decisions = 0;
    for _ in 0..ROUNDS {
        let (rate, done) = run(args, seconds, sluicegate);
        rates[0].push(rate);
        decisions += done;
        rates[1].push(run(args, seconds, governor).0);
    }
    (
        rates.map(|mut r| {
            r.sort_by(f64::total_cmp);
            r[r.len() / 2]
        }),
        decisions,
    )
}
