//! A keyed limiter's memory in bytes: `bytes_per_key` bounds what a key filled to its
//! largest state really takes (the process's resident memory, one test in this binary so
//! that no other test moves it), and a byte budget bounds the key count.

use sluicegate_core::memory::{InMemory, KeyedLimiter, OnFull};
use sluicegate_core::{
    Algorithm, AnyAlgorithm, Ban, Composite, ManualClock, SlidingLog, Ticks, SECOND,
};

const HOUR: Ticks = 3600 * SECOND;

/// The process's resident memory in bytes, where `/proc` says it.
fn resident() -> Option<usize> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: usize = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Fills `keys` keys of `key_bytes` bytes each to `limit` requests at distinct
/// instants (the most entries a log holds), and more keys than the table holds so that
/// full shards sweep (forgetting keys at their limit: `Evict`), and checks that the
/// resident memory grew by less than `bytes_per_key` for each key the table holds.
fn fill_within_estimate<A: InMemory>(algorithm: A, limit: u64, keys: usize, key_bytes: usize)
where
    A::State: Send,
{
    let per_key = KeyedLimiter::<String, A>::bytes_per_key(&algorithm, key_bytes);
    let before = resident();
    let limiter =
        KeyedLimiter::with_clock(algorithm, keys, ManualClock::new(0)).on_full(OnFull::Evict);
    for key in 0..keys + keys / 4 {
        let key = format!("{key:0key_bytes$}");
        for _ in 0..limit {
            limiter.clock().advance(1);
            assert!(limiter.check(key.as_str(), 1).allowed);
        }
    }
    // Up to the capacity at once (a sweep leaves fewer), and resident memory does not
    // shrink.
    let most = limiter.capacity();
    let (Some(before), Some(after)) = (before, resident()) else {
        return;
    };
    let grown = after.saturating_sub(before);
    println!("{most} keys: {grown} bytes resident, at most {per_key} per key");
    assert!(
        grown <= most * per_key,
        "{grown} bytes for {most} keys of at most {per_key}"
    );
    drop(limiter);
}

#[test]
fn bytes_per_key_bound_a_full_key_and_a_budget_bounds_the_keys() {
    // Keys of 1000 bytes, each with a full log of 1000 entries, as the service holds
    // them (any algorithm, its state behind a lock). Measured first, before freed memory
    // is reused.
    let log = AnyAlgorithm::from(SlidingLog::new(1000, HOUR).unwrap());
    fill_within_estimate(log, 1000, 400, 1000);
    // A composite clones its members' logs, and a clone grows to twice its length:
    // counted for both, with the vector of members and the ban's box.
    let log = || AnyAlgorithm::from(SlidingLog::new(300, HOUR).unwrap());
    let banned = Ban::new(log(), 1, HOUR, HOUR).unwrap();
    let composite = AnyAlgorithm::from(Composite::new(vec![log(), banned.into()]).unwrap());
    assert!(composite.max_heap_bytes() >= 2 * (2 * 300 * 16) + 4 * 8);
    // A full log's entries alone are within the estimate.
    let log = SlidingLog::new(1000, HOUR).unwrap();
    assert!(log.max_heap_bytes() >= 1000 * 16);
    assert!(KeyedLimiter::<u64, SlidingLog>::bytes_per_key(&log, 0) > log.max_heap_bytes());

    // A budget bounds the keys of a log of 10^5 a period, whatever keys are sprayed.
    let log = SlidingLog::new(100_000, HOUR).unwrap();
    let max_keys = KeyedLimiter::<u64, SlidingLog>::max_keys_within(&log, 64 << 20, 0);
    assert!(
        (1..=20).contains(&max_keys),
        "{max_keys} keys of up to 10^5 entries"
    );
    let limiter = KeyedLimiter::with_clock(log, max_keys, ManualClock::new(0));
    assert_eq!(limiter.capacity(), max_keys);
    for key in 0..1000u64 {
        assert!(limiter.check(&key, 1).allowed);
    }
    assert!(limiter.len() <= max_keys);
    // A budget below one key still holds one.
    assert_eq!(
        KeyedLimiter::<u64, SlidingLog>::max_keys_within(&log, 1, 0),
        1
    );
}
