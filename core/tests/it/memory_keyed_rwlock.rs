//! `KeyedRwLeases`: per key, the core's read-write lock transitions (answers and
//! stored state), its table bounded without evicting a key in use.

use proptest::prelude::*;

use crate::common::lock;
use sluicegate_core::memory::KeyedRwLeases;
use sluicegate_core::rwlock::{LockError, LockMode, RwLease, RwState};
use sluicegate_core::{Clock, LeaseRequest, ManualClock, SECOND};

use LockMode::{Exclusive, Shared};

#[derive(Debug, Clone)]
enum Op {
    Acquire {
        key: u8,
        owner: u8,
        mode: LockMode,
        wait: Option<u64>,
    },
    Release {
        key: u8,
        owner: u8,
    },
    Renew {
        key: u8,
        owner: u8,
    },
    Downgrade {
        key: u8,
        owner: u8,
    },
    Withdraw {
        key: u8,
        owner: u8,
    },
    Advance {
        by: u64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let (key, owner) = (0u8..3, 0u8..4);
    let mode = prop_oneof![Just(Shared), Just(Exclusive)];
    prop_oneof![
        5 => (key.clone(), owner.clone(), mode, prop::option::of(1u64..200))
            .prop_map(|(key, owner, mode, wait)| Op::Acquire { key, owner, mode, wait }),
        3 => (key.clone(), owner.clone()).prop_map(|(key, owner)| Op::Release { key, owner }),
        1 => (key.clone(), owner.clone()).prop_map(|(key, owner)| Op::Renew { key, owner }),
        1 => (key.clone(), owner.clone()).prop_map(|(key, owner)| Op::Downgrade { key, owner }),
        1 => (key, owner).prop_map(|(key, owner)| Op::Withdraw { key, owner }),
        2 => (0u64..150).prop_map(|by| Op::Advance { by }),
    ]
}

const KEYS: [&[u8]; 3] = [b"a", b"b", b"c"];
const OWNERS: [&[u8]; 4] = [b"w", b"x", b"y", b"z"];

type Next<T> = Result<(T, Option<RwState>), LockError>;

/// Runs `step` on the model's state of a key as the core does: a refused step leaves
/// it as it was.
fn model_step<T>(
    state: &mut Option<RwState>,
    step: impl FnOnce(Option<RwState>) -> Next<T>,
) -> Result<T, LockError> {
    let (answer, next) = step(state.clone())?;
    *state = next;
    Ok(answer)
}

proptest! {
    /// Requests acting at their own time (half of them) or the table's clock answer as
    /// the core's transitions on a state per key, and the table holds the core's state
    /// (or a fresh one not yet dropped).
    #[test]
    fn keyed_rw_leases_decide_as_the_core(
        lock in lock(),
        ops in prop::collection::vec((op(), any::<bool>()), 1..100),
    ) {
        let locks = KeyedRwLeases::with_clock(lock, 100, ManualClock::new(1_000));
        let mut model: [Option<RwState>; 3] = Default::default();
        for (op, explicit) in ops {
            let now = locks.clock().now();
            let request = |key: u8, owner: &'static [u8]| {
                let r = LeaseRequest::new(KEYS[usize::from(key)]).owner(owner).ttl(100);
                if explicit { r.at(now) } else { r }
            };
            match op {
                Op::Acquire { key, owner, mode, wait } => {
                    let (k, o) = (usize::from(key), OWNERS[usize::from(owner)]);
                    let want = model_step(&mut model[k], |s| match wait {
                        Some(wait) => lock.acquire(s, now, o, mode, 100, wait),
                        None => lock.try_acquire(s, now, o, mode, 100),
                    });
                    prop_assert_eq!(locks.acquire(&request(key, o), mode, wait), want);
                }
                Op::Release { key, owner } => {
                    let (k, o) = (usize::from(key), OWNERS[usize::from(owner)]);
                    let want = model_step(&mut model[k], |s| lock.release(s, now, o));
                    prop_assert_eq!(locks.release(&request(key, o)), want);
                }
                Op::Renew { key, owner } => {
                    let (k, o) = (usize::from(key), OWNERS[usize::from(owner)]);
                    let want = model_step(&mut model[k], |s| lock.renew(s, now, o, 100));
                    prop_assert_eq!(locks.renew(&request(key, o)), want);
                }
                Op::Downgrade { key, owner } => {
                    let (k, o) = (usize::from(key), OWNERS[usize::from(owner)]);
                    let want = model_step(&mut model[k], |s| lock.downgrade(s, now, o));
                    prop_assert_eq!(locks.downgrade(&request(key, o)), want);
                }
                Op::Withdraw { key, owner } => {
                    let (k, o) = (usize::from(key), OWNERS[usize::from(owner)]);
                    let want = model_step(&mut model[k], |s| Ok(((), lock.withdraw(s, now, o)?)));
                    prop_assert_eq!(locks.withdraw(&request(key, o)), want);
                }
                Op::Advance { by } => locks.clock().advance(by),
            }
            let now = locks.clock().now();
            for (k, key) in KEYS.iter().enumerate() {
                let held = locks.state(key);
                match model[k].as_ref().filter(|s| !s.is_fresh(now)) {
                    Some(state) => prop_assert_eq!(held.as_ref(), Some(state)),
                    None => prop_assert!(held.is_none_or(|s| s.is_fresh(now))),
                }
            }
        }
    }
}

/// A table of one key: a new key is refused (counted) until the key in use is fresh,
/// then takes its room; calls on keys never stored are typed errors that store nothing.
#[test]
fn a_full_table_refuses_new_keys_until_one_is_fresh() {
    let locks = KeyedRwLeases::with_clock(RwLease::read_write(), 1, ManualClock::new(SECOND));
    let ask = |key: &'static str| LeaseRequest::new(key).owner("app").ttl(100);
    let first = locks.acquire(&ask("a"), Exclusive, None).unwrap();
    assert!(first.grant.is_some());
    let refused = locks.acquire(&ask("b"), Shared, Some(50)).unwrap();
    assert_eq!((refused.grant, refused.place), (None, None));
    assert_eq!(refused.decision.retry_after, Some(100));
    assert_eq!(locks.refused(), 1);
    assert_eq!(locks.release(&ask("b")), Err(LockError::NotHeld));
    assert_eq!(locks.withdraw(&ask("b")), Err(LockError::NotQueued));
    assert_eq!(locks.len(), 1);
    assert!(matches!(
        locks.acquire(&ask("a").owner(""), Shared, None),
        Err(LockError::Param(_))
    ));
    // Released at the tick it was granted: fresh one tick later, then dropped.
    assert_eq!(locks.release(&ask("a")).unwrap().holds, 0);
    locks.clock().advance(1);
    let second = locks.acquire(&ask("b"), Shared, None).unwrap();
    assert!(second.grant.unwrap().token > first.grant.unwrap().token);
    assert_eq!(locks.len(), 1);
    locks.clock().advance(200);
    assert_eq!(locks.sweep(), 1);
    assert!(locks.is_empty());
}
