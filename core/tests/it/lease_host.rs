//! The lease contract on the in-memory keyed table: requests by name, acting at the
//! clock's time or the request's, the pure transitions' answers, denials as values.

use proptest::prelude::*;
use sluicegate_core::memory::KeyedLeases;
use sluicegate_core::{
    Clock, Concurrency, LeaseError, LeaseHost, LeaseRequest, LeaseState, ManualClock, ParamError,
    Ticks, MAX_TICKS, SECOND,
};

type Table = KeyedLeases<Vec<u8>, ManualClock>;

fn table(max: u64, max_keys: usize) -> Table {
    KeyedLeases::with_clock(
        Concurrency::new(max).unwrap(),
        max_keys,
        ManualClock::new(0),
    )
}

/// The table seen through the contract alone (its inherent methods share the names).
fn contract(table: &Table) -> &dyn LeaseHost<Error = LeaseError> {
    table
}

#[derive(Debug, Clone, Copy)]
enum Op {
    Acquire,
    Release,
    Renew,
}

/// One step: the time it moves forward by, the operation, its owner (the empty one is
/// refused) and its ttl (0 is refused).
type Step = (Ticks, Op, usize, Ticks);

const OWNERS: [&[u8]; 4] = [b"a", b"b", b"c", b""];

fn steps() -> impl Strategy<Value = Vec<Step>> {
    let op = prop_oneof![Just(Op::Acquire), Just(Op::Release), Just(Op::Renew)];
    prop::collection::vec((0..8u64, op, 0..OWNERS.len(), 0..6u64), 1..80)
}

/// The state as a caller can tell it: a fresh state is as good as none.
fn live(state: Option<LeaseState>, now: Ticks) -> Option<LeaseState> {
    state.filter(|s| !s.is_fresh(now))
}

proptest! {
    /// Through the trait at explicit times, the table answers every operation as the
    /// pure transitions do on one state, and holds the state they leave.
    #[test]
    fn the_trait_at_explicit_times_is_the_pure_transitions(
        max in 1..4u64,
        steps in steps(),
    ) {
        let concurrency = Concurrency::new(max).unwrap();
        let keyed = table(max, 16);
        let host = contract(&keyed);
        let mut model: Option<LeaseState> = None;
        let mut now = 0;
        for (step, op, owner, ttl) in steps {
            now += step;
            let owner = OWNERS[owner];
            let request = LeaseRequest::new("k").owner(owner).ttl(ttl).at(now);
            let state = model.clone();
            match op {
                Op::Acquire => {
                    let pure = concurrency.acquire(state, now, owner, ttl);
                    let acquired = pure.as_ref().map(|(a, _)| *a).map_err(Clone::clone);
                    prop_assert_eq!(host.acquire(&request), acquired);
                    if let Ok((_, next)) = pure {
                        model = next;
                    }
                }
                Op::Release | Op::Renew => {
                    let (pure, hosted) = if let Op::Release = op {
                        (concurrency.release(state, now, owner), host.release(&request))
                    } else {
                        (concurrency.renew(state, now, owner, ttl), host.renew(&request))
                    };
                    prop_assert_eq!(hosted, pure.as_ref().map(|(g, _)| *g).map_err(Clone::clone));
                    if let Ok((_, next)) = pure {
                        model = next;
                    }
                }
            }
            prop_assert_eq!(
                live(host.state(b"k").unwrap(), now),
                live(model.clone(), now)
            );
        }
    }
}

/// A request without a time acts at the clock's, one with a time at its own; a key
/// acted on at both acts at the later, so a token never goes back.
#[test]
fn a_request_acts_at_the_clock_or_at_its_own_time() {
    let keyed = table(1, 16);
    let host = contract(&keyed);
    keyed.clock().set(10 * SECOND);
    let lease = LeaseRequest::new("door").owner("alice").ttl(SECOND);
    let first = host.acquire(&lease).unwrap().grant.unwrap();
    assert_eq!((first.token, first.expires_at), (10 * SECOND, 11 * SECOND));
    // Held at the clock's time; expired at a time named by the request.
    let bob = LeaseRequest::new("door").owner("bob").ttl(SECOND);
    assert!(host.acquire(&bob).unwrap().grant.is_none());
    let later = host.acquire(&bob.at(20 * SECOND)).unwrap().grant.unwrap();
    assert_eq!(later.expires_at, 21 * SECOND);
    assert_eq!(host.release(&bob.at(20 * SECOND)).unwrap().holds, 0);
    // The key was dropped when freed; a request at an earlier time still gets a larger
    // token.
    let earlier = host.acquire(&lease.at(5 * SECOND)).unwrap().grant.unwrap();
    assert!(earlier.token > later.token);
    assert_eq!(keyed.clock().now(), 10 * SECOND);
}

#[test]
fn a_time_beyond_the_range_is_an_error() {
    let keyed = table(1, 16);
    let host = contract(&keyed);
    let beyond = LeaseRequest::new("k")
        .owner("a")
        .ttl(SECOND)
        .at(MAX_TICKS + 1);
    let out_of_range = |e: LeaseError| {
        matches!(
            e,
            LeaseError::Param(ParamError::OutOfRange { name: "now", .. })
        )
    };
    assert!(out_of_range(host.acquire(&beyond).unwrap_err()));
    assert!(out_of_range(host.release(&beyond).unwrap_err()));
    assert!(out_of_range(host.renew(&beyond).unwrap_err()));
    assert_eq!(host.state(b"k"), Ok(None));
    let at_the_top = beyond.at(MAX_TICKS);
    assert!(host.acquire(&at_the_top).unwrap().grant.is_some());
    assert_eq!(
        host.renew(&at_the_top).unwrap().expires_at,
        MAX_TICKS + SECOND
    );
    assert_eq!(host.release(&at_the_top).unwrap().holds, 0);
}

/// A lease held by another, and a table full of keys in use, are denials with a time to
/// retry; a bad parameter and a lease not held are errors.
#[test]
fn denials_are_values_and_bad_requests_errors() {
    let keyed = table(1, 1);
    let host = contract(&keyed);
    let alice = LeaseRequest::new("x").owner("alice").ttl(SECOND).at(0);
    assert!(host.acquire(&alice).unwrap().decision.allowed);
    let held = host.acquire(&alice.owner("bob")).unwrap();
    assert_eq!((held.grant, held.decision.allowed), (None, false));
    assert_eq!(held.decision.retry_after, Some(SECOND));
    let full = host.acquire(&LeaseRequest::new("y").owner("bob").ttl(SECOND).at(0));
    let full = full.unwrap();
    assert_eq!(
        (full.grant, full.decision.retry_after),
        (None, Some(SECOND))
    );

    assert!(matches!(
        host.acquire(&alice.owner("")),
        Err(LeaseError::Param(_))
    ));
    assert!(matches!(
        host.renew(&alice.ttl(0)),
        Err(LeaseError::Param(_))
    ));
    // A bad owner is a bad owner also on a key no one holds.
    let nobody = LeaseRequest::new("z").owner("").ttl(SECOND).at(0);
    assert!(matches!(host.release(&nobody), Err(LeaseError::Param(_))));
    assert_eq!(
        host.release(&nobody.owner("carol")),
        Err(LeaseError::NotHeld)
    );
    assert_eq!(host.release(&alice.owner("bob")), Err(LeaseError::NotHeld));
}
