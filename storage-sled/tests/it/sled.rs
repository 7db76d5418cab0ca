//! sluicegate-sled against the core and against a real sled database in a temp dir.

use std::sync::Arc;

use crate::common::temp_tree;
use proptest::prelude::*;
use sluicegate_core::{
    Algorithm, Ban, Composite, DecodeError, FixedWindow, LeakyBucket, Limiter, Pacing, ParamError,
    Request, SlidingCounter, SlidingLog, Ticks, TokenBucket, MAX_TICKS, SECOND,
};
use sluicegate_sled::{Durability, Error, SledLimiter};

/// A limiter deciding `alg` over a fresh tree.
fn temp_limiter<A: Algorithm>(
    alg: A,
    durability: Durability,
) -> (tempfile::TempDir, sled::Db, sled::Tree, SledLimiter<A>) {
    let (dir, db, tree) = temp_tree("limits");
    let limiter = SledLimiter::new(tree.clone(), alg, durability);
    (dir, db, tree, limiter)
}

/// Decides the same trace through sled and through the bare algorithm: the same
/// decisions, and after every step the record holds exactly the core's encoding.
fn same_as_core<A: Algorithm + Clone>(alg: A, trace: &[(Ticks, u64, u8)]) {
    let (_dir, _db, tree, limiter) = temp_limiter(alg.clone(), Durability::Background);
    let limiter = limiter.with_prefix("p/");
    let mut states = std::collections::HashMap::new();
    for &(now, cost, key) in trace {
        let key = [key];
        let state = states.remove(&key).flatten();
        let (expected, next) = alg.decide(state, now, cost);
        assert_eq!(
            limiter
                .check_request(&Request::new(&key).cost(cost).at(now))
                .unwrap(),
            expected
        );
        let stored = tree.get([b"p/".as_slice(), &key].concat()).unwrap();
        let encoded = next.as_ref().map(|s| alg.encode_to_vec(s));
        assert_eq!(stored.as_deref(), encoded.as_deref());
        states.insert(key, next);
    }
}

fn trace() -> impl Strategy<Value = Vec<(Ticks, u64, u8)>> {
    prop::collection::vec((0..3 * SECOND, 0..12u64, 0..3u8), 1..60).prop_map(|steps| {
        let mut now = 1_700_000_000 * SECOND;
        steps
            .into_iter()
            .map(|(gap, cost, key)| {
                now += gap / 4;
                (now, cost, key)
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn decides_and_stores_as_the_core(
        limit in 1..20u64,
        rate in 1..20u64,
        period in prop_oneof![Just(SECOND), 1..5 * SECOND],
        trace in trace(),
    ) {
        every_algorithm_as_the_core(limit, rate, period, &trace);
    }

    /// The same in the last seconds before `MAX_TICKS`.
    #[test]
    fn decides_and_stores_as_the_core_at_the_top(
        limit in 1..20u64,
        rate in 1..20u64,
        period in prop_oneof![Just(SECOND), 1..5 * SECOND],
        trace in trace(),
        end in prop_oneof![Just(0), Just(1), 0..3 * SECOND],
    ) {
        let last = trace.last().unwrap().0;
        let shift = MAX_TICKS - end - last;
        let trace: Vec<_> = trace.into_iter().map(|(now, cost, key)| (now + shift, cost, key)).collect();
        every_algorithm_as_the_core(limit, rate, period, &trace);
    }
}

/// Every algorithm through [`same_as_core`].
fn every_algorithm_as_the_core(limit: u64, rate: u64, period: Ticks, trace: &[(Ticks, u64, u8)]) {
    {
        same_as_core(FixedWindow::new(limit, period).unwrap(), trace);
        same_as_core(SlidingCounter::new(limit, period).unwrap(), trace);
        same_as_core(SlidingLog::new(limit, period).unwrap(), trace);
        same_as_core(TokenBucket::new(limit, rate, period).unwrap(), trace);
        same_as_core(LeakyBucket::new(limit, rate, period).unwrap(), trace);
        same_as_core(Pacing::new(limit, rate, period).unwrap(), trace);
        same_as_core(
            Ban::new(
                TokenBucket::new(limit, rate, period).unwrap(),
                5,
                period,
                period,
            )
            .unwrap(),
            trace,
        );
        same_as_core(
            Composite::new(vec![
                FixedWindow::new(limit, period).unwrap(),
                FixedWindow::new(3 * limit, 10 * period).unwrap(),
            ])
            .unwrap(),
            trace,
        );
    }
}

fn exact_under_threads<A: Algorithm + Clone + Send + Sync + 'static>(alg: A, bound: u64) {
    let (_dir, _db, _tree, limiter) = temp_limiter(alg, Durability::Background);
    let limiter = Arc::new(limiter);
    let now = 1_700_000_000 * SECOND;
    let handles: Vec<_> = (0..8)
        .map(|_| {
            let limiter = Arc::clone(&limiter);
            std::thread::spawn(move || {
                (0..bound / 4 + 10)
                    .filter(|_| {
                        limiter
                            .check_request(&Request::new(b"hot").at(now))
                            .unwrap()
                            .allowed
                    })
                    .count()
            })
        })
        .collect();
    let admitted: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(u64::try_from(admitted).unwrap(), bound);
}

#[test]
fn eight_threads_on_one_key_admit_exactly_the_bound() {
    exact_under_threads(TokenBucket::new(300, 1, SECOND).unwrap(), 300);
    exact_under_threads(FixedWindow::new(250, SECOND).unwrap(), 250);
    exact_under_threads(SlidingLog::new(200, SECOND).unwrap(), 200);
    exact_under_threads(
        Composite::new(vec![
            FixedWindow::new(500, SECOND).unwrap(),
            FixedWindow::new(150, 60 * SECOND).unwrap(),
        ])
        .unwrap(),
        150,
    );
}

#[test]
fn expired_keys_are_collected() {
    let (_dir, _db, tree, limiter) = temp_limiter(
        TokenBucket::new(10, 10, SECOND).unwrap(),
        Durability::Background,
    );
    let limiter = limiter.with_prefix("k/");
    let now = 1_700_000_000 * SECOND;
    // 100 000 keys take one token each (fresh again 100 ms later); 10 take all ten.
    for key in 0..100_000u32 {
        assert!(
            limiter
                .check_request(&Request::new(&key.to_be_bytes()).at(now))
                .unwrap()
                .allowed
        );
    }
    for key in 0..10u32 {
        let key = [b"live-".as_slice(), &key.to_be_bytes()].concat();
        assert!(
            limiter
                .check_request(&Request::new(&key).cost(10).at(now))
                .unwrap()
                .allowed
        );
    }
    // Another limiter's key in the same tree is not this limiter's to collect.
    tree.insert(b"other", b"not a state".as_slice()).unwrap();
    assert_eq!(limiter.collect_expired(now + SECOND / 10 - 1).unwrap(), 0);
    assert_eq!(limiter.collect_expired(now + SECOND / 10).unwrap(), 100_000);
    assert_eq!(tree.scan_prefix("k/").count(), 10);
    assert_eq!(tree.len(), 11);
    assert_eq!(limiter.collect_expired(now + SECOND).unwrap(), 10);
}

#[test]
fn a_corrupt_record_is_a_typed_error_and_harms_no_other_key() {
    let (_dir, _db, tree, limiter) =
        temp_limiter(FixedWindow::new(5, SECOND).unwrap(), Durability::Background);
    tree.insert(b"garbage", b"\x01\x01 not a state".as_slice())
        .unwrap();
    for _ in 0..2 {
        match limiter.check_request(&Request::new(b"garbage").at(0)) {
            Err(Error::Corrupt { key, source }) => {
                assert_eq!(key, b"garbage");
                assert!(matches!(
                    source,
                    DecodeError::TrailingBytes { .. }
                        | DecodeError::Truncated { .. }
                        | DecodeError::InvalidField { .. }
                ));
            }
            other => panic!("expected a corrupt-record error, got {other:?}"),
        }
    }
    // The bad record is untouched, and other keys work.
    assert_eq!(
        tree.get(b"garbage").unwrap().unwrap().as_ref(),
        b"\x01\x01 not a state"
    );
    assert!(admits(&limiter, Request::new(b"fine").at(0)));
    assert!(limiter.state(b"garbage").is_err());
    // `reset` deletes only a state of its algorithm: this one stays for an operator.
    assert!(matches!(
        limiter.reset(b"garbage"),
        Err(Error::Corrupt { .. })
    ));
    tree.remove(b"garbage").unwrap();
    assert!(admits(&limiter, Request::new(b"garbage").at(0)));
}

#[test]
fn reset_deletes_only_states_of_its_algorithm() {
    let window = FixedWindow::new(5, SECOND).unwrap();
    let (_dir, _db, tree, limiter) = temp_limiter(window, Durability::EveryDecision);
    let limiter = limiter.with_prefix("w/");
    assert!(admits(&limiter, Request::new(b"alice").cost(5).at(0)));
    assert!(!admits(&limiter, Request::new(b"alice").at(0)));
    limiter.reset(b"alice").unwrap();
    assert!(tree.get(b"w/alice").unwrap().is_none());
    assert!(admits(&limiter, Request::new(b"alice").at(0)));
    // A missing key is already fresh.
    limiter.reset(b"nobody").unwrap();
    // An application's own value, and another algorithm's state, are refused by name.
    tree.insert(b"w/session:42", b"user=alice".as_slice())
        .unwrap();
    let bucket = TokenBucket::new(3, 1, SECOND).unwrap();
    let other = bucket.encode_to_vec(&bucket.decide(None, 0, 1).1.unwrap());
    tree.insert(b"w/bob", other.clone()).unwrap();
    tree.insert(b"w/\xff\x00", b"x".as_slice()).unwrap();
    let refused = |key: &[u8]| match limiter.reset(key) {
        Err(e @ Error::Corrupt { .. }) => e.to_string(),
        other => panic!("reset of {key:?} gave {other:?}"),
    };
    assert_eq!(
        refused(b"session:42"),
        "key \"session:42\" holds a state sluicegate cannot read: state encoding version 117 is not supported (this build reads version 1)"
    );
    assert_eq!(
        refused(b"bob"),
        "key \"bob\" holds a state sluicegate cannot read: state is a token bucket's, expected a fixed window's"
    );
    assert!(
        refused(b"\xff\x00").starts_with("key \"\\xff\\x00\" holds a state sluicegate cannot read")
    );
    assert_eq!(
        tree.get(b"w/session:42").unwrap().unwrap().as_ref(),
        b"user=alice"
    );
    assert_eq!(
        tree.get(b"w/bob").unwrap().unwrap().as_ref(),
        other.as_slice()
    );
    assert_eq!(tree.len(), 4);
}

/// Issue 16: a time beyond `MAX_TICKS` is refused before anything is read or written.
#[test]
fn times_beyond_the_range_are_typed_errors() {
    let (_dir, _db, tree, limiter) =
        temp_limiter(Pacing::new(0, 1, SECOND).unwrap(), Durability::Background);
    fn refused<T: std::fmt::Debug>(result: Result<T, Error>, late: Ticks) {
        match result {
            Err(Error::Time(ParamError::OutOfRange {
                name: "now", value, ..
            })) => assert_eq!(value, late),
            other => panic!("expected a time error, got {other:?}"),
        }
    }
    for late in [MAX_TICKS + 1, Ticks::MAX] {
        refused(limiter.check_request(&Request::new(b"k").at(late)), late);
        refused(limiter.peek(&Request::new(b"k").at(late)), late);
        refused(limiter.reserve(&Request::new(b"k").at(late), 0), late);
        refused(limiter.collect_expired(late), late);
        // The host contract refuses the same times the same way.
        let request = Request::new(b"k").at(late);
        refused(Limiter::check(&limiter, &request), late);
        refused(Limiter::peek(&limiter, &request), late);
        refused(Limiter::reserve(&limiter, &request, 0), late);
    }
    assert!(tree.is_empty());
    // At the top itself: one unit, admitted once.
    for now in [MAX_TICKS - 1, MAX_TICKS] {
        assert!(
            limiter
                .check_request(&Request::new(&now.to_be_bytes()).at(now))
                .unwrap()
                .allowed
        );
        assert!(
            !limiter
                .check_request(&Request::new(&now.to_be_bytes()).at(now))
                .unwrap()
                .allowed
        );
    }
}

#[test]
fn state_survives_reopening_the_database() {
    let dir = tempfile::tempdir().unwrap();
    let window = FixedWindow::new(3, 3600 * SECOND).unwrap();
    {
        let db = sled::open(dir.path()).unwrap();
        let limiter = SledLimiter::new(
            db.open_tree("q").unwrap(),
            window,
            Durability::EveryDecision,
        );
        assert!(
            limiter
                .check_request(&Request::new(b"daily").cost(2).at(0))
                .unwrap()
                .allowed
        );
    }
    let db = sluicegate_test_support::sled_open(dir.path());
    let limiter = SledLimiter::new(
        db.open_tree("q").unwrap(),
        window,
        Durability::EveryDecision,
    );
    // Two of three were used before the restart: one more fits.
    let peek = limiter.peek(&Request::new(b"daily").at(1)).unwrap();
    assert!(peek.allowed && peek.remaining == 0);
    assert!(admits(&limiter, Request::new(b"daily").at(1)));
    assert!(!admits(&limiter, Request::new(b"daily").at(2)));
}

#[test]
fn the_sweeper_collects_in_the_background() {
    let (_dir, _db, tree, limiter) = temp_limiter(
        TokenBucket::new(10, 1000, SECOND).unwrap(),
        Durability::Background,
    );
    for key in 0..100u32 {
        assert!(limiter.check(&key.to_be_bytes(), 1).unwrap().allowed);
    }
    let sweeper = limiter.spawn_sweeper(std::time::Duration::from_millis(10));
    // Each state is fresh a millisecond later; the sweeper should empty the tree soon.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !tree.is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    drop(sweeper);
    assert!(tree.is_empty());
}

/// Issue 16 item 1's clean-up on sled: `purge` deletes every state of its algorithm under
/// its prefix, fresh or not, and nothing else.
#[test]
fn purge_deletes_only_states_of_its_algorithm_under_its_prefix() {
    let window = FixedWindow::new(5, SECOND).unwrap();
    let (_dir, _db, tree, limiter) = temp_limiter(window, Durability::EveryDecision);
    let limiter = limiter.with_prefix("w/");
    for key in [b"a".as_slice(), b"b", b"c"] {
        assert!(
            limiter
                .check_request(&Request::new(key).at(0))
                .unwrap()
                .allowed
        );
    }
    // An application's value and another algorithm's state under the prefix, and a
    // state of this algorithm outside it.
    tree.insert(b"w/session:42", b"user=alice".as_slice())
        .unwrap();
    let bucket = TokenBucket::new(3, 1, SECOND).unwrap();
    let other = bucket.encode_to_vec(&bucket.decide(None, 0, 1).1.unwrap());
    tree.insert(b"w/bob", other.clone()).unwrap();
    let outside = window.encode_to_vec(&window.decide(None, 0, 1).1.unwrap());
    tree.insert(b"v/a", outside.clone()).unwrap();
    assert_eq!(limiter.purge().unwrap(), 3);
    assert_eq!(limiter.purge().unwrap(), 0);
    let mut left: Vec<Vec<u8>> = tree.iter().keys().map(|k| k.unwrap().to_vec()).collect();
    left.sort();
    assert_eq!(
        left,
        [b"v/a".to_vec(), b"w/bob".to_vec(), b"w/session:42".to_vec()]
    );
    assert_eq!(
        tree.get(b"w/bob").unwrap().unwrap().as_ref(),
        other.as_slice()
    );
    assert_eq!(
        tree.get(b"v/a").unwrap().unwrap().as_ref(),
        outside.as_slice()
    );
}

/// Whether `limiter` admits `request`.
fn admits<A: Algorithm>(limiter: &SledLimiter<A>, request: Request<'_>) -> bool {
    limiter.check_request(&request).unwrap().allowed
}
