//! The host contract: requests by name, the in-memory keyed limiter as a `Limiter`, and
//! the fail policy.

use sluicegate_core::memory::KeyedLimiter;
use sluicegate_core::{
    AnyAlgorithm, Clock, Decision, FailPolicy, FixedWindow, Limiter, ManualClock, Outcome,
    ParamError, Request, TokenBucket, MAX_TICKS, SECOND,
};

fn keyed(algorithm: impl Into<AnyAlgorithm>) -> KeyedLimiter<Vec<u8>, AnyAlgorithm, ManualClock> {
    KeyedLimiter::with_clock(algorithm.into(), 100, ManualClock::new(0))
}

#[test]
fn requests_are_built_by_name() {
    let request = Request::new("k");
    assert_eq!(
        (request.key, request.cost, request.now),
        (&b"k"[..], 1, None)
    );
    let key = vec![1u8, 2];
    let request = Request::new(&key).at(7).cost(3);
    assert_eq!(
        (request.key, request.cost, request.now),
        (&[1u8, 2][..], 3, Some(7))
    );
}

/// A request without a time is decided at the clock's, one with a time at its own, and
/// both answer as the inherent methods do.
#[test]
fn the_keyed_limiter_decides_at_the_clock_or_the_request_time() {
    let limiter = keyed(FixedWindow::new(2, SECOND).unwrap());
    let twin = keyed(FixedWindow::new(2, SECOND).unwrap());
    for _ in 0..3 {
        assert_eq!(
            Limiter::check(&limiter, &Request::new("a")),
            Ok(twin.check(&b"a"[..], 1))
        );
    }
    assert!(!Limiter::peek(&limiter, &Request::new("a")).unwrap().allowed);
    // The next window, named by the request: the clock has not moved.
    let later = Request::new("a").at(SECOND);
    assert!(Limiter::peek(&limiter, &later).unwrap().allowed);
    assert_eq!(
        Limiter::check(&limiter, &later.cost(2)).unwrap().remaining,
        0
    );
    assert!(!Limiter::check(&limiter, &later).unwrap().allowed);
    // Reset forgets the key on every time line.
    Limiter::reset(&limiter, b"a").unwrap();
    assert!(Limiter::check(&limiter, &later.cost(2)).unwrap().allowed);
    assert!(limiter.clock().now() == 0);
}

#[test]
fn a_time_beyond_the_range_is_an_error() {
    let limiter = keyed(TokenBucket::new(1, 1, SECOND).unwrap());
    let beyond = Request::new("a").at(MAX_TICKS + 1);
    assert!(matches!(
        Limiter::check(&limiter, &beyond),
        Err(ParamError::OutOfRange { name: "now", .. })
    ));
    assert!(Limiter::peek(&limiter, &beyond).is_err());
    assert!(Limiter::reserve(&limiter, &beyond, SECOND).is_err());
    assert!(
        Limiter::check(&limiter, &Request::new("a").at(MAX_TICKS))
            .unwrap()
            .allowed
    );
}

/// Buckets book ahead; a window decides at the request's time.
#[test]
fn reserve_books_where_the_algorithm_can() {
    let bucket = keyed(TokenBucket::new(1, 1, SECOND).unwrap());
    let request = Request::new("a").at(5 * SECOND);
    assert_eq!(
        Limiter::reserve(&bucket, &request, SECOND).unwrap().delay,
        0
    );
    let booked = Limiter::reserve(&bucket, &request, SECOND).unwrap();
    assert!(booked.allowed);
    assert_eq!(booked.delay, SECOND);
    assert!(!Limiter::reserve(&bucket, &request, SECOND).unwrap().allowed);

    let window = keyed(FixedWindow::new(1, SECOND).unwrap());
    assert!(Limiter::reserve(&window, &request, SECOND).unwrap().allowed);
    assert!(!Limiter::reserve(&window, &request, SECOND).unwrap().allowed);
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StoreError {
    Unreachable,
    Corrupt,
}

fn unreachable(e: &StoreError) -> bool {
    *e == StoreError::Unreachable
}

#[test]
fn the_fail_policy_answers_only_for_an_unreachable_store() {
    let decided = Decision::admit(10, 9, SECOND, 0);
    let local = Decision::deny(10, 0, Some(SECOND), SECOND);
    let policies = [
        FailPolicy::default(),
        FailPolicy::Open,
        FailPolicy::Closed,
        FailPolicy::Local(local),
    ];
    assert_eq!(policies[0], FailPolicy::Error);
    let expected = [
        Err(StoreError::Unreachable),
        Ok(Outcome::Open(StoreError::Unreachable)),
        Ok(Outcome::Closed(StoreError::Unreachable)),
        Ok(Outcome::Local(local, StoreError::Unreachable)),
    ];
    for (policy, expected) in policies.iter().zip(expected) {
        let apply = |result| policy.apply(result, unreachable, |l: &Decision| *l);
        assert_eq!(apply(Ok(decided)), Ok(Outcome::Decided(decided)));
        assert_eq!(apply(Err(StoreError::Corrupt)), Err(StoreError::Corrupt));
        assert_eq!(apply(Err(StoreError::Unreachable)), expected);
    }
    let open: Outcome<StoreError> = Outcome::Open(StoreError::Unreachable);
    assert!(open.allowed() && open.decision().is_none());
    assert_eq!(open.error(), Some(&StoreError::Unreachable));
    let closed: Outcome<StoreError> = Outcome::Closed(StoreError::Unreachable);
    assert!(!closed.allowed() && closed.decision().is_none());
    let by_local = Outcome::Local(local, StoreError::Unreachable);
    assert!(!by_local.allowed());
    assert_eq!(by_local.decision(), Some(&local));
    let by_store: Outcome<StoreError> = Outcome::Decided(decided);
    assert!(by_store.allowed() && by_store.error().is_none());
}

/// The fail policy's local limiter can be a host of the contract itself.
#[test]
fn a_local_limiter_decides_while_the_store_is_away() {
    let policy = FailPolicy::Local(keyed(TokenBucket::new(1, 1, SECOND).unwrap()));
    let request = Request::new("a");
    let decide =
        |l: &KeyedLimiter<Vec<u8>, AnyAlgorithm, ManualClock>| Limiter::check(l, &request).unwrap();
    let first = policy.apply(Err(StoreError::Unreachable), unreachable, decide);
    assert!(first.unwrap().allowed());
    let second = policy.apply(Err(StoreError::Unreachable), unreachable, decide);
    assert!(!second.unwrap().allowed());
}
