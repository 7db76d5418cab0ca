//! The keyed limiter: per-key decisions as the core's, exact under threads, bounded memory.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use crate::common::*;
use proptest::prelude::*;
use sluicegate_core::memory::{InMemory, KeyedLimiter, OnFull};
use sluicegate_core::{FixedWindow, ManualClock, SlidingLog, Ticks, TokenBucket, SECOND};

fn same_as_core<A: InMemory + Clone>(alg: A, trace: &[(Ticks, u64)], keys: &[u8]) {
    let limiter = KeyedLimiter::with_clock(alg.clone(), 1_000, ManualClock::new(trace[0].0));
    let mut states: HashMap<u8, Option<A::State>> = HashMap::new();
    for (&(now, cost), key) in trace.iter().zip(keys) {
        limiter.clock().set(now);
        let state = states.remove(key).flatten();
        let (expected, next) = alg.decide(state, now, cost);
        assert_eq!(limiter.peek(key, cost), expected);
        assert_eq!(limiter.check(key, cost), expected, "key {key} at {now}");
        states.insert(*key, next);
    }
}

proptest! {
    #[test]
    fn decides_each_key_as_the_core(
        limit in limit(1_000_000_000),
        period in period(),
        raw in raw_arrivals(),
        keys in prop::collection::vec(0..4u8, 120),
    ) {
        every_algorithm_as_the_core(limit, period, &arrivals(&raw, period, limit), &keys);
    }

    /// The same in the last periods before `MAX_TICKS`.
    #[test]
    fn decides_each_key_as_the_core_at_the_top(
        limit in limit(1_000_000_000),
        period in period(),
        raw in raw_arrivals(),
        keys in prop::collection::vec(0..4u8, 120),
        end in top_end(),
    ) {
        let trace = at_the_top(&arrivals(&raw, period, limit), 1, period, end);
        every_algorithm_as_the_core(limit, period, &trace, &keys);
    }
}

/// A window, a log and a bucket through [`same_as_core`].
fn every_algorithm_as_the_core(limit: u64, period: Ticks, trace: &[(Ticks, u64)], keys: &[u8]) {
    same_as_core(FixedWindow::new(limit, period).unwrap(), trace, keys);
    same_as_core(
        SlidingLog::new(limit.min(1000), period).unwrap(),
        trace,
        keys,
    );
    if let Ok(bucket) = TokenBucket::new(limit, limit, period) {
        same_as_core(bucket, trace, keys);
    }
}

#[test]
fn eight_threads_admit_exactly_the_bound_per_key() {
    const KEYS: usize = 64;
    const LIMIT: u64 = 100;
    let limiter = Arc::new(KeyedLimiter::with_clock(
        TokenBucket::new(LIMIT, 1, SECOND).unwrap(),
        10_000,
        ManualClock::new(SECOND),
    ));
    let handles: Vec<_> = (0..8)
        .map(|thread| {
            let limiter = Arc::clone(&limiter);
            std::thread::spawn(move || {
                let mut admitted = vec![0u64; KEYS];
                for round in 0..30 * KEYS {
                    // Each thread walks the keys in its own order.
                    let key = (round * (2 * thread + 1)) % KEYS;
                    admitted[key] += u64::from(limiter.check(&key, 1).allowed);
                }
                admitted
            })
        })
        .collect();
    let mut total = vec![0u64; KEYS];
    for handle in handles {
        for (sum, n) in total.iter_mut().zip(handle.join().unwrap()) {
            *sum += n;
        }
    }
    assert_eq!(total, vec![LIMIT; KEYS]);
    assert_eq!(limiter.len(), KEYS);
}

#[test]
fn fresh_keys_are_dropped() {
    let limiter = KeyedLimiter::with_clock(
        FixedWindow::new(5, SECOND).unwrap(),
        1_000,
        ManualClock::new(0),
    );
    for key in 0..500u32 {
        assert!(limiter.check(&key, 1).allowed);
    }
    assert_eq!(limiter.len(), 500);
    // A zero-cost check of a fresh key stores nothing.
    assert!(limiter.check(&9999, 0).allowed);
    assert_eq!(limiter.len(), 500);
    limiter.clock().advance(SECOND);
    assert_eq!(limiter.sweep(), 500);
    assert!(limiter.is_empty());
    assert_eq!(limiter.evicted(), 0);
}

/// A bucket of 1000 per second for each of at most 1000 keys, all in one shard (which
/// holds its share of them), and that shard's capacity.
fn one_shard() -> (KeyedLimiter<u64, TokenBucket, ManualClock, OneShard>, usize) {
    let max_keys = 1000;
    let limiter = KeyedLimiter::with_hasher(
        TokenBucket::new(1000, 1000, SECOND).unwrap(),
        max_keys,
        ManualClock::new(0),
        OneShard,
    );
    let shard_capacity = max_keys / limiter.shard_count();
    (limiter, shard_capacity)
}

#[test]
fn a_full_limiter_evicts_the_keys_closest_to_fresh() {
    let (limiter, shard_capacity) = one_shard();
    // Key k takes k + 1 tokens: the larger the key, the later it is fresh again.
    for key in 0..shard_capacity as u64 {
        assert!(limiter.check(&key, key + 1).allowed);
    }
    assert_eq!(limiter.len(), shard_capacity);
    assert!(limiter.check(&1000, 1).allowed);
    // The shard was full: it evicted its eighth closest to fresh, keys 0, 1, ...
    let evicted = (shard_capacity / 8).max(1);
    assert_eq!(limiter.evicted(), evicted as u64);
    assert_eq!(limiter.len(), shard_capacity - evicted + 1);
    for key in 0..shard_capacity as u64 {
        let fresh = limiter.peek(&key, 0).remaining == 1000;
        assert_eq!(fresh, key < evicted as u64, "key {key}");
    }
}

#[test]
fn fresh_keys_stay_until_the_shard_is_full_then_go_before_any_live_key() {
    let (limiter, shard_capacity) = one_shard();
    let shard_capacity = shard_capacity as u64;
    // Keys 0 to 63 are fresh again after a millisecond.
    for key in 0..64 {
        assert!(limiter.check(&key, 1).allowed);
    }
    limiter.clock().advance(2_000);
    // Live keys up to the shard's capacity: the fresh ones are held meanwhile, and
    // decided as fresh.
    for key in 64..shard_capacity {
        assert!(limiter.check(&key, 1000).allowed);
    }
    assert_eq!(limiter.len() as u64, shard_capacity);
    assert_eq!(limiter.peek(&0, 0).remaining, 1000);
    // One more: the full shard drops its fresh keys, and evicts no live key.
    assert!(limiter.check(&shard_capacity, 1).allowed);
    assert_eq!(limiter.evicted(), 0);
    assert_eq!(limiter.len() as u64, shard_capacity - 64 + 1);
    for key in 64..shard_capacity {
        assert_eq!(
            limiter.peek(&key, 0).remaining,
            0,
            "key {key} kept its state"
        );
    }
}

#[test]
fn a_key_spray_never_grows_past_the_cap() {
    const CAP: usize = 100_000;
    const SPRAY: u64 = 10_000_000;
    let limiter = KeyedLimiter::with_clock(
        TokenBucket::new(10, 1, SECOND).unwrap(),
        CAP,
        ManualClock::new(SECOND),
    );
    for key in 0..SPRAY {
        // Every key stays far from fresh, so only eviction can make room.
        assert!(limiter.check(&key, 5).allowed);
        if key % 1_000_000 == 0 {
            assert!(limiter.len() <= CAP);
        }
    }
    let held = limiter.len();
    assert!(held <= CAP && held > CAP / 2, "{held} keys held");
    assert!(limiter.evicted() >= SPRAY - CAP as u64);
    println!("{SPRAY} keys sprayed, {held} held, peak RSS {}", peak_rss());
}

const HOUR: Ticks = 3600 * SECOND;

/// A key denied by a one-per-hour window, then a spray of new keys (each spent by its
/// one request) into a table that holds a tenth of them: the denied key is not
/// forgotten, so it stays denied; new keys are refused instead.
#[test]
fn a_key_spray_does_not_reset_a_denied_key() {
    let limiter =
        KeyedLimiter::with_clock(SlidingLog::new(1, HOUR).unwrap(), 100, ManualClock::new(0));
    let victim = u64::MAX;
    assert!(limiter.check(&victim, 1).allowed);
    assert!(!limiter.check(&victim, 1).allowed);
    // Each sprayed key is fresh later than the victim: the closest to fresh is the victim.
    for key in 0..1000 {
        limiter.clock().advance(1);
        let _ = limiter.check(&key, 1);
    }
    assert!(limiter.len() <= 100);
    assert!(limiter.refused() > 0);
    let again = limiter.check(&victim, 1);
    assert!(!again.allowed, "the victim was forgotten: {again:?}");
    assert_eq!(again.retry_after, Some(HOUR - 1000));
}

/// The same spray of keys that still admit (one request of five): they are forgotten,
/// the denied key is not, and no new key is refused.
#[test]
fn keys_that_admit_are_forgotten_before_a_key_that_refuses() {
    let limiter =
        KeyedLimiter::with_clock(SlidingLog::new(5, HOUR).unwrap(), 100, ManualClock::new(0));
    let victim = u64::MAX;
    for _ in 0..5 {
        assert!(limiter.check(&victim, 1).allowed);
    }
    assert!(!limiter.check(&victim, 1).allowed);
    for key in 0..1000 {
        limiter.clock().advance(1);
        assert!(limiter.check(&key, 1).allowed);
    }
    assert!(limiter.len() <= 100);
    assert!(limiter.evicted() >= 900);
    assert_eq!(limiter.refused(), 0);
    assert!(
        !limiter.check(&victim, 1).allowed,
        "the victim was forgotten"
    );
}

/// One shard of a large table, filled with keys that refuse: key k spent its bucket
/// (two, refilled at one per hour) at tick k, so it admits again at `k + HOUR` and is
/// fresh at `k + 2 HOUR`. Returns the limiter and how many keys it holds.
fn full_of_refusing_keys(
    on_full: OnFull,
) -> (KeyedLimiter<u64, TokenBucket, ManualClock, OneShard>, u64) {
    let limiter = KeyedLimiter::with_hasher(
        TokenBucket::new(2, 1, HOUR).unwrap(),
        1 << 19,
        ManualClock::new(0),
        OneShard,
    )
    .on_full(on_full);
    let held = ((1 << 19) / limiter.shard_count()) as u64;
    for key in 0..held {
        assert!(limiter.check(&key, 2).allowed);
        limiter.clock().advance(1);
    }
    assert_eq!(limiter.len() as u64, held);
    assert_eq!(limiter.evicted(), 0);
    (limiter, held)
}

/// Under `DenyNew` a shard full of keys that refuse refuses a new key until the
/// earliest of them admits again (told in `retry_after`), without sweeping its keys on
/// every refusal; then that key is forgotten for the new one.
#[test]
fn deny_new_refuses_new_keys_while_every_key_refuses() {
    let started = Instant::now();
    let (limiter, held) = full_of_refusing_keys(OnFull::DenyNew);
    let per_insertion = started.elapsed() / u32::try_from(held).unwrap();
    let now = held;
    let refused = limiter.check(&held, 1);
    assert!(!refused.allowed);
    assert_eq!(
        (
            refused.limit,
            refused.remaining,
            refused.retry_after,
            refused.reset_after
        ),
        (2, 0, Some(HOUR - now), 0)
    );
    assert_refusals_do_not_sweep(held, per_insertion, |i| {
        let key = held + 1 + i;
        assert_eq!(limiter.check(&key, 1).retry_after, Some(HOUR - now));
    });
    assert_eq!(limiter.refused(), 1001);
    assert_eq!(limiter.evicted(), 0);
    // Key 0 admits again: it goes for a new key, and the next one waits for key 1.
    limiter.clock().set(HOUR);
    assert!(limiter.check(&held, 1).allowed);
    assert_eq!(limiter.evicted(), 1);
    assert_eq!(limiter.peek(&0, 0).remaining, 2, "key 0 was forgotten");
    assert_eq!(limiter.check(&(held + 1), 1).retry_after, Some(1));
    assert_eq!(limiter.len() as u64, held);
}

/// Under `Evict` the same shard forgets an eighth of its keys, closest to fresh first.
#[test]
fn evict_forgets_the_keys_closest_to_fresh_when_every_key_refuses() {
    let (limiter, held) = full_of_refusing_keys(OnFull::Evict);
    assert!(limiter.check(&held, 1).allowed);
    let evicted = (held / 8).max(1);
    assert_eq!(limiter.evicted(), evicted);
    assert_eq!(limiter.refused(), 0);
    for key in [0, evicted - 1, evicted, held - 1] {
        let fresh = limiter.peek(&key, 0).remaining == 2;
        assert_eq!(fresh, key < evicted, "key {key}");
    }
}

fn peak_rss() -> String {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM"))
                .map(str::to_owned)
        })
        .unwrap_or_else(|| "unknown".into())
}

/// A clock each thread sets for itself: hot keys are decided later than sprayed keys.
struct ThreadClock;

thread_local! {
    static NOW: std::cell::Cell<Ticks> = const { std::cell::Cell::new(0) };
}

impl sluicegate_core::Clock for ThreadClock {
    fn now(&self) -> Ticks {
        NOW.with(std::cell::Cell::get)
    }
}

/// Threads deciding hot keys while spraying new keys into a small limiter, so that
/// shards sweep and evict throughout: every hot key admits exactly what the core admits
/// for the same requests one after another (a decision on a held key runs under the
/// shard's shared lock, an eviction under its exclusive one, and none is lost). The
/// bucket decides on each key's word, the log under each key's lock.
#[test]
fn decisions_under_eviction_are_exact_per_key() {
    fn run<A: InMemory + Send + Sync + Clone>(alg: A, label: &str)
    where
        A::State: Send,
    {
        const HOT_KEYS: usize = 32;
        const HOT: u64 = HOT_KEYS as u64;
        const SEED_COST: u64 = 50;
        const THREADS: u64 = 6;
        const ROUNDS: u64 = 300;
        // Sprayed keys at one second, hot keys at two: a sprayed key is fresh before
        // any hot key, so an eviction (of the keys closest to fresh) never takes a hot one.
        let (spray_at, hot_at) = (SECOND, 2 * SECOND);
        let limiter = KeyedLimiter::with_clock(alg.clone(), 1024, ThreadClock);
        NOW.with(|now| now.set(hot_at));
        for key in 0..HOT {
            assert!(limiter.check(&key, SEED_COST).allowed);
        }
        let admitted: Vec<Vec<u64>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..THREADS)
                .map(|thread| {
                    let limiter = &limiter;
                    s.spawn(move || {
                        let mut admitted = vec![0u64; HOT_KEYS];
                        let mut spray = 1_000_000 * (thread + 1);
                        for round in 0..ROUNDS * HOT {
                            let key = (round * (2 * thread + 1)) % HOT;
                            NOW.with(|now| now.set(hot_at));
                            admitted[usize::try_from(key).unwrap()] +=
                                u64::from(limiter.check(&key, 1).allowed);
                            NOW.with(|now| now.set(spray_at));
                            for _ in 0..4 {
                                spray += 1;
                                assert!(limiter.check(&spray, 1).allowed);
                            }
                        }
                        admitted
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        // The core, one request after another: the order does not matter at unit cost
        // with nothing refilled or expired within the run.
        let mut state = alg.decide(None, hot_at, SEED_COST).1;
        let mut expected = 0;
        for _ in 0..THREADS * ROUNDS {
            let (decision, next) = alg.decide(state, hot_at, 1);
            expected += u64::from(decision.allowed);
            state = next;
        }
        assert_eq!(expected, 100 - SEED_COST);
        for key in 0..HOT_KEYS {
            let total: u64 = admitted.iter().map(|a| a[key]).sum();
            assert_eq!(total, expected, "{label}: key {key}");
        }
        assert!(
            limiter.evicted() > 1000,
            "{label}: {} evicted",
            limiter.evicted()
        );
        assert!(limiter.len() <= 1024);
    }
    run(TokenBucket::new(100, 1, 1000 * SECOND).unwrap(), "bucket");
    run(SlidingLog::new(100, 1000 * SECOND).unwrap(), "log");
}
