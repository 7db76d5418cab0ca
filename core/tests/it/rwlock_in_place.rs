//! The lock family's transitions in place (`RwLease::*_in`) against the ones by value:
//! on any sequence, refusals and errors included (bad parameters, leases not held,
//! holds, tokens and places run out, a full queue), the same answers and after every
//! call the same state, byte for byte; an error leaves the state in place as it was.

use proptest::prelude::*;

use crate::common::lock;
use sluicegate_core::rwlock::{LockError, LockMode, RwAcquired, RwLease, RwState, MAX_WAITERS};
use sluicegate_core::{Grant, Ticks, MAX_TICKS};

use LockMode::{Exclusive, Shared};

#[derive(Debug, Clone)]
enum Call {
    Acquire {
        owner: Vec<u8>,
        mode: LockMode,
        ttl: u64,
        wait: u64,
    },
    Try {
        owner: Vec<u8>,
        mode: LockMode,
        ttl: u64,
    },
    Release {
        owner: Vec<u8>,
    },
    Renew {
        owner: Vec<u8>,
        ttl: u64,
    },
    Downgrade {
        owner: Vec<u8>,
    },
    Withdraw {
        owner: Vec<u8>,
    },
}

/// How the starting state is pushed to a limit, so the errors past it happen.
#[derive(Debug, Clone)]
enum Edge {
    None,
    LastToken(u64),
    LastPlace(u64),
    Holds(u64),
    /// A writer until the given tick after the start, then a full queue of writers.
    FullQueue(u64),
}

#[derive(Debug, PartialEq)]
enum Answer {
    Acquired(RwAcquired),
    Grant(Grant),
    Withdrawn,
}

fn call() -> impl Strategy<Value = Call> {
    // An empty owner, a zero ttl or wait: the parameter errors.
    let owner = prop_oneof![12 => (0u8..4).prop_map(|o| vec![o]), 1 => Just(vec![])];
    let mode = prop_oneof![Just(Shared), Just(Exclusive)];
    let (ttl, wait) = (0u64..200, 0u64..200);
    prop_oneof![
        4 => (owner.clone(), mode.clone(), ttl.clone(), wait)
            .prop_map(|(owner, mode, ttl, wait)| Call::Acquire { owner, mode, ttl, wait }),
        2 => (owner.clone(), mode, ttl.clone())
            .prop_map(|(owner, mode, ttl)| Call::Try { owner, mode, ttl }),
        3 => owner.clone().prop_map(|owner| Call::Release { owner }),
        1 => (owner.clone(), ttl).prop_map(|(owner, ttl)| Call::Renew { owner, ttl }),
        1 => owner.clone().prop_map(|owner| Call::Downgrade { owner }),
        1 => owner.prop_map(|owner| Call::Withdraw { owner }),
    ]
}

fn edge() -> impl Strategy<Value = Edge> {
    prop_oneof![
        3 => Just(Edge::None),
        1 => (0u64..3).prop_map(Edge::LastToken),
        1 => (0u64..3).prop_map(Edge::LastPlace),
        2 => (0u64..3).prop_map(Edge::Holds),
        2 => (1u64..100).prop_map(Edge::FullQueue),
    ]
}

fn in_place(lock: &RwLease, s: &mut RwState, now: Ticks, call: &Call) -> Result<Answer, LockError> {
    Ok(match call {
        Call::Acquire {
            owner,
            mode,
            ttl,
            wait,
        } => Answer::Acquired(lock.acquire_in(s, now, owner, *mode, *ttl, *wait)?),
        Call::Try { owner, mode, ttl } => {
            Answer::Acquired(lock.try_acquire_in(s, now, owner, *mode, *ttl)?)
        }
        Call::Release { owner } => Answer::Grant(lock.release_in(s, now, owner)?),
        Call::Renew { owner, ttl } => Answer::Grant(lock.renew_in(s, now, owner, *ttl)?),
        Call::Downgrade { owner } => Answer::Grant(lock.downgrade_in(s, now, owner)?),
        Call::Withdraw { owner } => {
            lock.withdraw_in(s, now, owner)?;
            Answer::Withdrawn
        }
    })
}

type Next = Result<(Answer, Option<RwState>), LockError>;

fn by_value(lock: &RwLease, s: Option<RwState>, now: Ticks, call: &Call) -> Next {
    let grant = |(grant, next)| (Answer::Grant(grant), next);
    let acquired = |(acquired, next)| (Answer::Acquired(acquired), next);
    Ok(match call {
        Call::Acquire {
            owner,
            mode,
            ttl,
            wait,
        } => acquired(lock.acquire(s, now, owner, *mode, *ttl, *wait)?),
        Call::Try { owner, mode, ttl } => acquired(lock.try_acquire(s, now, owner, *mode, *ttl)?),
        Call::Release { owner } => grant(lock.release(s, now, owner)?),
        Call::Renew { owner, ttl } => grant(lock.renew(s, now, owner, *ttl)?),
        Call::Downgrade { owner } => grant(lock.downgrade(s, now, owner)?),
        Call::Withdraw { owner } => (Answer::Withdrawn, lock.withdraw(s, now, owner)?),
    })
}

fn put(bytes: &mut Vec<u8>, fields: &[u64]) {
    for field in fields {
        bytes.extend(field.to_be_bytes());
    }
}

/// A writer `[0]` with the token `start` until `held_until`, and a full queue of
/// writers dropping out one by one from 100 ticks after it.
fn full_queue(lock: &RwLease, start: Ticks, held_until: Ticks) -> RwState {
    let mut bytes = vec![1, 12];
    put(&mut bytes, &[start, MAX_WAITERS, 1, MAX_WAITERS]);
    put(&mut bytes, &[start, held_until, 1, 1, 1]);
    bytes.push(0);
    for i in 0..MAX_WAITERS {
        put(&mut bytes, &[i + 1, held_until + 100 + i * 37 % 200, 1, 3]);
        bytes.push(0xff);
        bytes.extend(&i.to_be_bytes()[6..]);
    }
    lock.decode(&bytes).expect("a valid state")
}

/// The state `prelude` leaves at `start`, pushed to `edge` through its encoding.
fn starting(lock: &RwLease, start: Ticks, prelude: &[Call], edge: &Edge) -> Option<RwState> {
    let mut state = None;
    for call in prelude {
        if let Ok((_, next)) = by_value(lock, state.clone(), start, call) {
            state = next;
        }
    }
    let mut bytes = lock.encode_to_vec(&state.unwrap_or_default());
    let held = u64::from_be_bytes(bytes[18..26].try_into().unwrap()) > 0;
    let (at, k) = match *edge {
        Edge::None => return lock.decode(&bytes).ok(),
        Edge::FullQueue(held_for) => return Some(full_queue(lock, start, start + held_for)),
        Edge::LastToken(k) => (2, k),
        Edge::LastPlace(k) => (10, k),
        // The first holder's hold count.
        Edge::Holds(k) if held => (50, k),
        Edge::Holds(_) => return lock.decode(&bytes).ok(),
    };
    bytes[at..at + 8].copy_from_slice(&(u64::MAX - k).to_be_bytes());
    Some(lock.decode(&bytes).expect("a valid state"))
}

/// Runs `calls` (each after a gap) from `start` on a state held in place, deleted when
/// fresh as a host deletes it, and on a state passed by value.
fn same_in_place(
    lock: &RwLease,
    start: Option<RwState>,
    calls: &[(u64, Call)],
) -> Result<(), TestCaseError> {
    let mut now = 1_000;
    let mut held = start.clone().unwrap_or_default();
    let mut passed = start;
    for (gap, call) in calls {
        now = (now + gap).min(MAX_TICKS);
        let before = lock.encode_to_vec(&held);
        let got = in_place(lock, &mut held, now, call);
        match (got, by_value(lock, passed.clone(), now, call)) {
            (Ok(got), Ok((want, next))) => {
                prop_assert_eq!(got, want, "{:?} at {}", call, now);
                prop_assert_eq!(next.is_none(), held.is_fresh(now));
                if next.is_none() {
                    held = RwState::default();
                }
                passed = next;
            }
            (Err(got), Err(want)) => {
                prop_assert_eq!(&got, &want, "{:?} at {}", call, now);
                prop_assert_eq!(&lock.encode_to_vec(&held), &before, "{:?}: {:?}", call, got);
            }
            (got, want) => prop_assert!(false, "{:?}: {:?} in place, {:?}", call, got, want),
        }
        let passed = lock.encode_to_vec(&passed.clone().unwrap_or_default());
        prop_assert_eq!(lock.encode_to_vec(&held), passed);
    }
    Ok(())
}

proptest! {
    #[test]
    fn in_place_transitions_are_the_by_value_ones(
        lock in lock(),
        prelude in prop::collection::vec(call(), 0..12),
        edge in edge(),
        calls in prop::collection::vec((0u64..80, call()), 1..60),
    ) {
        let start = starting(&lock, 1_000, &prelude, &edge);
        same_in_place(&lock, start, &calls)?;
    }
}

/// A full queue refuses a newcomer in place while a lease in it has expired: the
/// expired lease stays until a call that succeeds reclaims it.
#[test]
fn a_full_queue_refuses_without_reclaiming() {
    let lock = RwLease::read_write().fair();
    let mut state = full_queue(&lock, 1_000, 1_010);
    let before = lock.encode_to_vec(&state);
    let ask = lock.acquire_in(&mut state, 1_010, b"new", Exclusive, 100, 50);
    assert_eq!(ask, Err(LockError::QueueFull));
    assert_eq!(lock.encode_to_vec(&state), before);
    assert_eq!(state.holders().len(), 1, "expired at 1 010, still stored");
    let asked = lock.try_acquire_in(&mut state, 1_010, b"new", Exclusive, 100);
    assert!(asked.unwrap().grant.is_none());
    assert!(state.holders().is_empty());
}
