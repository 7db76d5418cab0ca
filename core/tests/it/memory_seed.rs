//! A keyed limiter's states moved out and in whole (`remove_state`, `seed_state`): how a
//! host carries each key's use to a limiter with new parameters.

use crate::common::OneShard;
use sluicegate_core::memory::{KeyedLimiter, OnFull};
use sluicegate_core::{
    Algorithm, AnyAlgorithm, Clock, FixedWindow, ManualClock, SlidingLog, Ticks, TokenBucket,
    SECOND,
};

const MINUTE: Ticks = 60 * SECOND;

fn keyed(algorithm: impl Into<AnyAlgorithm>) -> KeyedLimiter<Vec<u8>, AnyAlgorithm, ManualClock> {
    KeyedLimiter::with_clock(algorithm.into(), 100, ManualClock::new(10 * MINUTE))
}

/// The service's move on a key's first decision after a change: out of the old limiter,
/// carried, into the new one.
fn carry(
    old: &KeyedLimiter<Vec<u8>, AnyAlgorithm, ManualClock>,
    new: &KeyedLimiter<Vec<u8>, AnyAlgorithm, ManualClock>,
    key: &[u8],
) {
    let state = old.remove_state(key).unwrap();
    let now = new.clock().now();
    let carried = new.algorithm().carry_from(old.algorithm(), &state, now);
    assert!(new.seed_state(key, carried.unwrap()));
}

#[test]
fn a_carried_key_has_the_rest_of_the_new_limit() {
    for (old, new) in [
        (
            keyed(FixedWindow::new(3, MINUTE).unwrap()),
            keyed(FixedWindow::new(5, MINUTE).unwrap()),
        ),
        // A bucket's state lives in its entry's word.
        (
            keyed(TokenBucket::new(3, 3, MINUTE).unwrap()),
            keyed(TokenBucket::new(5, 5, MINUTE).unwrap()),
        ),
        (
            keyed(SlidingLog::new(3, MINUTE).unwrap()),
            keyed(SlidingLog::new(5, MINUTE).unwrap()),
        ),
    ] {
        assert!(old.check(b"k".as_slice(), 1).allowed);
        carry(&old, &new, b"k");
        assert!(old.is_empty(), "the old limiter forgot the key");
        assert_eq!(old.remove_state(b"k".as_slice()), None);
        let admitted = (0..10)
            .filter(|_| new.check(b"k".as_slice(), 1).allowed)
            .count();
        assert_eq!(admitted, 4, "{:?}", new.algorithm());
    }
}

#[test]
fn a_removed_key_is_fresh() {
    let limiter = keyed(FixedWindow::new(2, MINUTE).unwrap());
    assert!(limiter.check(b"k".as_slice(), 2).allowed);
    let state = limiter.remove_state(b"k".as_slice()).unwrap();
    let (_, expected) = limiter.algorithm().decide(None, 10 * MINUTE, 2);
    assert_eq!(Some(state), expected);
    assert_eq!(limiter.peek(b"k".as_slice(), 0).remaining, 2);
}

#[test]
fn a_held_key_keeps_its_state() {
    let limiter = keyed(FixedWindow::new(5, MINUTE).unwrap());
    let (_, full) = limiter.algorithm().decide(None, 10 * MINUTE, 5);
    assert!(limiter.check(b"k".as_slice(), 1).allowed);
    assert!(!limiter.seed_state(b"k".as_slice(), full.unwrap()));
    assert_eq!(limiter.peek(b"k".as_slice(), 0).remaining, 4);
}

#[test]
fn a_state_fresh_by_now_stores_nothing() {
    let limiter = keyed(FixedWindow::new(5, MINUTE).unwrap());
    let (_, old) = limiter.algorithm().decide(None, 9 * MINUTE, 5);
    assert!(limiter.seed_state(b"k".as_slice(), old.unwrap()));
    assert!(limiter.is_empty());
    // A held key whose state is fresh by now takes the seed.
    assert!(limiter.check(b"k".as_slice(), 1).allowed);
    limiter.clock().advance(MINUTE);
    let (_, spent) = limiter.algorithm().decide(None, 11 * MINUTE, 5);
    assert!(limiter.seed_state(b"k".as_slice(), spent.unwrap()));
    assert!(!limiter.check(b"k".as_slice(), 1).allowed);
}

/// A full shard of keys that refuse, under `DenyNew`, refuses a seed as it refuses a
/// request on a new key; under `Evict` it makes room.
#[test]
fn a_full_shard_refuses_a_seed_as_a_new_key() {
    for (on_full, seeded) in [(OnFull::DenyNew, false), (OnFull::Evict, true)] {
        let limiter = KeyedLimiter::with_hasher(
            FixedWindow::new(1, MINUTE).unwrap(),
            4,
            ManualClock::new(0),
            OneShard,
        )
        .on_full(on_full);
        let held = (4 / limiter.shard_count()) as u64;
        for key in 0..held {
            assert!(limiter.check(&key, 1).allowed);
        }
        let (_, state) = limiter.algorithm().decide(None, 0, 1);
        assert_eq!(
            limiter.seed_state(&held, state.unwrap()),
            seeded,
            "{on_full:?}"
        );
        assert_eq!(limiter.refused(), u64::from(!seeded));
        assert_eq!(limiter.peek(&held, 1).allowed, !seeded);
    }
}
