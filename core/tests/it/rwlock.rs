//! Read-write locks and fair queues: proptests of the invariants over any interleaving
//! of readers, writers and waiters (never a writer beside another holder, tokens above
//! every earlier one, grants in queue order, dead waiters out at their expiry, the
//! encoding canonical and its decoder total), and the literature's scenarios (Redisson's
//! `RReadWriteLock`, etcd's fair mutex by revision).

use proptest::prelude::*;

use crate::common::lock;
use sluicegate_core::limits::{MAX_LEASES, MAX_OWNER_LEN};
use sluicegate_core::rwlock::{
    LockError, LockMode, RwAcquired, RwHolder, RwLease, RwState, RwWaiter, MAX_WAITERS,
};
use sluicegate_core::{DecodeError, ParamError, Ticks, MAX_TICKS};

use LockMode::{Exclusive, Shared};

#[derive(Debug, Clone)]
enum Op {
    Try {
        owner: u8,
        mode: LockMode,
        ttl: u64,
    },
    Wait {
        owner: u8,
        mode: LockMode,
        ttl: u64,
        wait: u64,
    },
    Release {
        owner: u8,
    },
    Renew {
        owner: u8,
        ttl: u64,
    },
    Downgrade {
        owner: u8,
    },
    Withdraw {
        owner: u8,
    },
}

fn mode() -> impl Strategy<Value = LockMode> {
    prop_oneof![Just(Shared), Just(Exclusive)]
}

fn op() -> impl Strategy<Value = Op> {
    let owner = 0u8..5;
    prop_oneof![
        2 => (owner.clone(), mode(), 1u64..200).prop_map(|(owner, mode, ttl)| Op::Try { owner, mode, ttl }),
        4 => (owner.clone(), mode(), 1u64..200, 1u64..200)
            .prop_map(|(owner, mode, ttl, wait)| Op::Wait { owner, mode, ttl, wait }),
        3 => owner.clone().prop_map(|owner| Op::Release { owner }),
        1 => (owner.clone(), 1u64..200).prop_map(|(owner, ttl)| Op::Renew { owner, ttl }),
        1 => owner.clone().prop_map(|owner| Op::Downgrade { owner }),
        1 => owner.prop_map(|owner| Op::Withdraw { owner }),
    ]
}

/// What the definition sees of a state at `now`: its unexpired leases and places.
struct Live<'a> {
    holders: Vec<&'a RwHolder>,
    waiters: Vec<&'a RwWaiter>,
}

fn live(state: &RwState, now: Ticks) -> Live<'_> {
    Live {
        holders: state
            .holders()
            .iter()
            .filter(|h| h.expires_at() > now)
            .collect(),
        waiters: state
            .waiters()
            .iter()
            .filter(|w| w.expires_at() > now)
            .collect(),
    }
}

/// Whether the definition grants `owner` a lease in `mode` on the live state `s`.
fn grantable(lock: &RwLease, s: &Live<'_>, owner: &[u8], mode: LockMode) -> bool {
    let others: Vec<_> = s.holders.iter().filter(|h| h.owner() != owner).collect();
    let holders_admit = if mode == Exclusive {
        others.is_empty()
    } else {
        others.iter().all(|h| h.mode() == Shared) && (others.len() as u64) < lock.max_holders()
    };
    if let Some(mine) = s.holders.iter().find(|h| h.owner() == owner) {
        // Re-entry, or an upgrade only as the sole holder.
        return mode == Shared || mine.mode() == Exclusive || others.is_empty();
    }
    let place = s
        .waiters
        .iter()
        .find(|w| w.owner() == owner)
        .map(|w| w.place());
    let queue_admits = if lock.is_fair() {
        // Only the head of the queue, or a newcomer to an empty one.
        match place {
            Some(mine) => s.waiters.iter().all(|w| w.place() >= mine),
            None => s.waiters.is_empty(),
        }
    } else {
        mode == Exclusive || s.waiters.iter().all(|w| w.owner() == owner)
    };
    holders_admit && queue_admits
}

/// Runs `steps` (each after a gap) from `start` like a host that deletes the key when
/// the core returns `None`, checking every answer against the definition.
fn run(lock: RwLease, start: Ticks, steps: &[(u64, Op)]) -> Result<(), TestCaseError> {
    let mut state: Option<RwState> = None;
    let mut now = start;
    let mut highest_token = 0;
    for (gap, op) in steps {
        now = (now + gap).min(MAX_TICKS);
        let stored = state.clone().unwrap_or_default();
        let before = live(&stored, now);
        let kept = state.clone();
        match *op {
            Op::Try { owner, mode, ttl }
            | Op::Wait {
                owner, mode, ttl, ..
            } => {
                let wait = match *op {
                    Op::Wait { wait, .. } => Some(wait),
                    _ => None,
                };
                let o = [owner];
                let (acquired, next) = match wait {
                    Some(wait) => lock.acquire(kept, now, &o, mode, ttl, wait),
                    None => lock.try_acquire(kept, now, &o, mode, ttl),
                }
                .unwrap();
                let want = grantable(&lock, &before, &o, mode);
                prop_assert_eq!(acquired.decision.allowed, want, "{:?} at {}", op, now);
                let held = stored.held(&o, now);
                match acquired.grant {
                    Some(grant) => {
                        prop_assert!(acquired.place.is_none());
                        let fresh_token = match held {
                            None => true,
                            Some(h) => h.mode() == Shared && mode == Exclusive,
                        };
                        if fresh_token {
                            // Above every token granted before, readers' included.
                            prop_assert!(grant.token > highest_token);
                            highest_token = grant.token;
                        } else {
                            prop_assert_eq!(grant.token, held.unwrap().token());
                        }
                    }
                    None if !lock.is_fair() => {
                        // Exact: granted once the blockers are gone if nobody acts, not a
                        // tick earlier (a fair waiter's own place may lapse before).
                        let retry = acquired.decision.retry_after.unwrap();
                        prop_assert!(retry > 0);
                        if now + retry <= MAX_TICKS {
                            let probe = |at| lock.try_acquire(next.clone(), at, &o, mode, ttl);
                            prop_assert!(!probe(now + retry - 1).unwrap().0.decision.allowed);
                            prop_assert!(probe(now + retry).unwrap().0.decision.allowed);
                        }
                        check_place(&lock, &before, &next, &acquired, (&o, mode, wait), now)?;
                    }
                    None => {
                        check_place(&lock, &before, &next, &acquired, (&o, mode, wait), now)?;
                    }
                }
                state = next;
            }
            Op::Release { owner } | Op::Renew { owner, .. } | Op::Downgrade { owner } => {
                let o = [owner];
                let got = match *op {
                    Op::Release { .. } => lock.release(kept, now, &o),
                    Op::Renew { ttl, .. } => lock.renew(kept, now, &o, ttl),
                    _ => lock.downgrade(kept, now, &o),
                };
                match (got, stored.held(&o, now)) {
                    (Ok((grant, next)), Some(h)) => {
                        prop_assert_eq!(grant.token, h.token());
                        if let Op::Renew { ttl, .. } = *op {
                            prop_assert_eq!(grant.expires_at, now + ttl);
                        }
                        state = next;
                    }
                    // Refused: the stored state stays as it was.
                    (Err(LockError::NotHeld), None) => continue,
                    (got, want) => prop_assert!(false, "{:?}: core {:?}, held {:?}", op, got, want),
                }
            }
            Op::Withdraw { owner } => {
                let o = [owner];
                let waiting = before.waiters.iter().any(|w| w.owner() == o);
                match lock.withdraw(kept, now, &o) {
                    Ok(next) => {
                        prop_assert!(waiting);
                        state = next;
                    }
                    Err(e) => {
                        prop_assert!(!waiting && e == LockError::NotQueued);
                        continue;
                    }
                }
            }
        }
        check_state(&lock, &state, now)?;
    }
    Ok(())
}

/// A denied acquire queues exactly when the rules say: a place of its own, expiring
/// `wait` after `now`; anything else leaves the queue as it was.
fn check_place(
    lock: &RwLease,
    before: &Live<'_>,
    next: &Option<RwState>,
    acquired: &RwAcquired,
    (owner, mode, wait): (&[u8], LockMode, Option<u64>),
    now: Ticks,
) -> Result<(), TestCaseError> {
    let next = next.clone().unwrap_or_default();
    let holder = before.holders.iter().any(|h| h.owner() == owner);
    let queues = wait.is_some() && !holder && (lock.is_fair() || mode == Exclusive);
    let mine = next.waiters().iter().find(|w| w.owner() == owner);
    if queues {
        let place = acquired.place.expect("queued");
        prop_assert_eq!(place.expires_at, now + wait.unwrap());
        prop_assert_eq!(mine.map(|w| w.place()), Some(place.number));
        // `ahead` counts the live waiters before it: whom a host wakes first.
        let at = next.waiters().iter().position(|w| w.owner() == owner);
        prop_assert_eq!(at, usize::try_from(place.ahead).ok());
    } else {
        // A try, an upgrade or an unfair reader never takes a place.
        let waiters: Vec<_> = next.waiters().iter().collect();
        prop_assert_eq!(waiters, before.waiters.clone());
    }
    Ok(())
}

/// The invariants of every stored state.
fn check_state(lock: &RwLease, state: &Option<RwState>, now: Ticks) -> Result<(), TestCaseError> {
    let Some(s) = state else { return Ok(()) };
    let holders = s.holders();
    // Never a writer beside any other holder, never more holders than allowed.
    if holders.iter().any(|h| h.mode() == Exclusive) {
        prop_assert_eq!(holders.len(), 1);
    }
    prop_assert!(holders.len() as u64 <= lock.max_holders());
    // Nothing expired is kept: a dead waiter is gone at its expiry.
    prop_assert!(holders.iter().all(|h| h.expires_at() > now));
    prop_assert!(s.waiters().iter().all(|w| w.expires_at() > now));
    prop_assert!(holders.windows(2).all(|w| w[0].token() < w[1].token()));
    prop_assert!(s.waiters().windows(2).all(|w| w[0].place() < w[1].place()));
    prop_assert_eq!(s.next_turn(now), s.waiters().first());
    let bytes = lock.encode_to_vec(s);
    let decoded = lock.decode(&bytes);
    prop_assert_eq!(decoded.as_ref(), Ok(s));
    Ok(())
}

proptest! {
    #[test]
    fn any_interleaving_keeps_the_rules(
        lock in lock(),
        steps in prop::collection::vec((0u64..80, op()), 1..80),
    ) {
        run(lock, 1_000, &steps)?;
    }

    #[test]
    fn the_rules_hold_at_the_top_of_the_time_range(
        lock in lock(),
        steps in prop::collection::vec((0u64..80, op()), 1..40),
    ) {
        run(lock, MAX_TICKS - 2_000, &steps)?;
    }

    /// A waiter that never asks again stops blocking the one behind it exactly at its
    /// place's expiry.
    #[test]
    fn a_dead_waiter_blocks_the_queue_until_its_expiry_and_not_after(
        hold in 1u64..100,
        wait in 1u64..300,
        behind in 1u64..300,
    ) {
        let lock = RwLease::new(1).unwrap().fair();
        let (_, s) = lock.acquire(None, 0, b"holder", Exclusive, hold, 10).unwrap();
        let (dead, s) = lock.acquire(s, 0, b"dead", Exclusive, 10, wait).unwrap();
        let (next, s) = lock.acquire(s, 0, b"next", Shared, 10, behind + wait).unwrap();
        prop_assert_eq!(dead.place.unwrap().ahead, 0);
        prop_assert_eq!(next.place.unwrap().ahead, 1);
        // Nobody acts: the holder's lease and the dead place end, then `next` may go.
        let until = hold.max(wait);
        prop_assert_eq!(next.decision.retry_after, Some(until));
        let (early, _) = lock.try_acquire(s.clone(), until - 1, b"next", Shared, 10).unwrap();
        prop_assert!(!early.decision.allowed);
        let (then, _) = lock.try_acquire(s, until, b"next", Shared, 10).unwrap();
        prop_assert!(then.decision.allowed);
    }

    #[test]
    fn random_bytes_never_panic_the_decoder(
        lock in lock(),
        bytes in prop::collection::vec(any::<u8>(), 0..300),
    ) {
        let _ = lock.decode(&bytes);
        // With a valid header too, so the fields themselves are exercised.
        let mut framed = vec![1, 12];
        framed.extend(&bytes);
        if let Ok(s) = lock.decode(&framed) {
            prop_assert_eq!(lock.encode_to_vec(&s), framed);
        }
    }

    /// One encoding per state: any bytes that decode encode back to themselves.
    #[test]
    fn a_corrupted_state_is_refused_or_canonical(
        lock in lock(),
        steps in prop::collection::vec((0u64..80, op()), 1..40),
        at in any::<prop::sample::Index>(),
        byte in any::<u8>(),
    ) {
        let mut state = None;
        let mut now = 1_000;
        for (gap, op) in steps {
            now += gap;
            if let Op::Wait { owner, mode, ttl, wait } = op {
                let kept = state.clone();
                if let Ok((_, next)) = lock.acquire(kept, now, &[owner], mode, ttl, wait) {
                    state = next;
                }
            }
        }
        let mut bytes = lock.encode_to_vec(&state.unwrap_or_default());
        let i = at.index(bytes.len());
        bytes[i] = byte;
        if let Ok(s) = lock.decode(&bytes) {
            prop_assert_eq!(lock.encode_to_vec(&s), bytes);
        }
    }
}

fn granted(answer: &RwAcquired) -> u64 {
    answer.grant.expect("granted").token
}

/// Redisson's `RReadWriteLock`: many readers, one writer, reentrant, a writer may read,
/// and a write lock downgraded to a read lock (there: lock read, then unlock write).
#[test]
fn redisson_read_write_lock() {
    let rw = RwLease::read_write();
    let (a, s) = rw.try_acquire(None, 10, b"reader-a", Shared, 100).unwrap();
    let (b, s) = rw.try_acquire(s, 11, b"reader-b", Shared, 100).unwrap();
    assert!(granted(&b) > granted(&a));
    let (w, s) = rw.try_acquire(s, 12, b"writer", Exclusive, 100).unwrap();
    assert!(!w.decision.allowed);
    assert_eq!(
        w.decision.retry_after,
        Some(99),
        "until both readers' leases end"
    );
    let (again, s) = rw.try_acquire(s, 13, b"reader-a", Shared, 100).unwrap();
    assert_eq!(again.grant.unwrap().holds, 2);
    let (_, s) = rw.release(s, 14, b"reader-b").unwrap();
    let (_, s) = rw.release(s, 14, b"reader-a").unwrap();
    let (_, s) = rw.release(s, 14, b"reader-a").unwrap();
    let (w, s) = rw.try_acquire(s, 15, b"writer", Exclusive, 100).unwrap();
    let write_token = granted(&w);
    assert!(write_token > granted(&b), "above every reader's token");
    // The writer reads under its write lease; another reader waits.
    let (read, s) = rw.try_acquire(s, 16, b"writer", Shared, 100).unwrap();
    assert_eq!(
        (granted(&read), read.grant.unwrap().holds),
        (write_token, 2)
    );
    let (other, s) = rw.try_acquire(s, 16, b"reader-c", Shared, 100).unwrap();
    assert!(!other.decision.allowed);
    // Downgraded: the same token, readers join at once.
    let (down, s) = rw.downgrade(s, 17, b"writer").unwrap();
    assert_eq!(down.token, write_token);
    let (other, _) = rw.try_acquire(s, 17, b"reader-c", Shared, 100).unwrap();
    assert!(granted(&other) > write_token);
}

/// A reader becomes the writer only as the sole holder; a refused upgrade never queues.
#[test]
fn a_reader_upgrades_only_as_the_sole_holder() {
    let rw = RwLease::read_write().fair();
    let (a, s) = rw.try_acquire(None, 10, b"a", Shared, 100).unwrap();
    let (_, s) = rw.try_acquire(s, 20, b"b", Shared, 100).unwrap();
    let (up, s) = rw.acquire(s, 30, b"a", Exclusive, 100, 50).unwrap();
    assert!(!up.decision.allowed && up.place.is_none());
    assert_eq!(up.decision.retry_after, Some(90), "until b's lease ends");
    let s = s.unwrap();
    assert!(s.waiters().is_empty());
    let (_, s) = rw.release(Some(s), 40, b"b").unwrap();
    let (up, s) = rw.try_acquire(s, 50, b"a", Exclusive, 100).unwrap();
    let up = up.grant.unwrap();
    assert!(up.token > granted(&a), "an upgrade takes a new token");
    assert_eq!(up.holds, 2);
    let (c, _) = rw.try_acquire(s, 60, b"c", Shared, 100).unwrap();
    assert!(!c.decision.allowed);
}

/// Once a writer waits, new readers queue behind it even on an unfair lock.
#[test]
fn a_waiting_writer_holds_back_new_readers() {
    let rw = RwLease::read_write();
    let (_, s) = rw.try_acquire(None, 0, b"r1", Shared, 100).unwrap();
    let (w, s) = rw.acquire(s, 1, b"w", Exclusive, 100, 500).unwrap();
    assert_eq!(w.place.unwrap().ahead, 0);
    let (r2, s) = rw.acquire(s, 2, b"r2", Shared, 100, 500).unwrap();
    assert!(!r2.decision.allowed);
    assert!(r2.place.is_none(), "an unfair lock queues writers only");
    // The reader already in re-enters: it must not deadlock behind the writer.
    let (again, s) = rw.try_acquire(s, 3, b"r1", Shared, 100).unwrap();
    assert!(again.decision.allowed);
    let (_, s) = rw.release(s, 4, b"r1").unwrap();
    let (_, s) = rw.release(s, 4, b"r1").unwrap();
    assert_eq!(s.as_ref().unwrap().next_turn(4).unwrap().owner(), b"w");
    let (w, s) = rw.acquire(s, 5, b"w", Exclusive, 100, 500).unwrap();
    assert!(w.decision.allowed);
    let (_, s) = rw.release(s, 6, b"w").unwrap();
    let (r2, _) = rw.try_acquire(s, 7, b"r2", Shared, 100).unwrap();
    assert!(r2.decision.allowed);
}

/// etcd's `concurrency.Mutex`: waiters are served by revision (here the place number),
/// a newcomer cannot overtake, and a waiter whose session died drops out.
#[test]
fn etcd_fair_mutex_by_revision() {
    let mutex = RwLease::new(1).unwrap().fair();
    let (_, s) = mutex.acquire(None, 0, b"a", Exclusive, 100, 60).unwrap();
    let (b, s) = mutex.acquire(s, 1, b"b", Exclusive, 100, 60).unwrap();
    let (c, s) = mutex.acquire(s, 2, b"c", Exclusive, 100, 60).unwrap();
    let (b, c) = (b.place.unwrap(), c.place.unwrap());
    assert!(b.number < c.number);
    assert_eq!((b.ahead, c.ahead), (0, 1));
    let (_, s) = mutex.release(s, 10, b"a").unwrap();
    // c asks first after the release, but b's revision is older.
    let (early, s) = mutex.acquire(s, 11, b"c", Exclusive, 100, 60).unwrap();
    assert!(!early.decision.allowed);
    let (late, s) = mutex.try_acquire(s, 11, b"late", Exclusive, 100).unwrap();
    assert!(!late.decision.allowed && late.place.is_none());
    let (b, s) = mutex.acquire(s, 12, b"b", Exclusive, 100, 60).unwrap();
    assert!(b.decision.allowed);
    // b's session dies holding the lock; c kept its place by asking again.
    let (_, s) = mutex.acquire(s, 70, b"c", Exclusive, 100, 60).unwrap();
    let (c, _) = mutex.acquire(s, 112, b"c", Exclusive, 100, 60).unwrap();
    assert!(granted(&c) > granted(&b));
}

/// A counted lock may be fair too: a freed permit goes to the head of the queue.
#[test]
fn a_fair_counted_lock_serves_its_queue_in_order() {
    let pool = RwLease::new(2).unwrap().fair();
    let (_, s) = pool.acquire(None, 0, b"a", Shared, 100, 50).unwrap();
    let (_, s) = pool.acquire(s, 0, b"b", Shared, 100, 50).unwrap();
    let (c, s) = pool.acquire(s, 1, b"c", Shared, 100, 50).unwrap();
    let (d, s) = pool.acquire(s, 2, b"d", Shared, 100, 50).unwrap();
    assert_eq!((c.decision.remaining, d.place.unwrap().ahead), (0, 1));
    let (_, s) = pool.release(s, 3, b"a").unwrap();
    let (d, s) = pool.acquire(s, 4, b"d", Shared, 100, 50).unwrap();
    assert!(!d.decision.allowed);
    assert_eq!(s.as_ref().unwrap().next_turn(4).unwrap().owner(), b"c");
    let (c, s) = pool.acquire(s, 5, b"c", Shared, 100, 50).unwrap();
    assert!(c.decision.allowed);
    let s = pool.withdraw(s, 6, b"d").unwrap().unwrap();
    assert!(s.waiters().is_empty());
}

#[test]
fn bad_input_is_a_typed_error() {
    assert!(RwLease::new(0).is_err());
    assert!(RwLease::new(MAX_LEASES + 1).is_err());
    let rw = RwLease::read_write();
    let long = vec![b'x'; usize::try_from(MAX_OWNER_LEN).unwrap() + 1];
    for owner in [&b""[..], &long] {
        assert!(matches!(
            rw.try_acquire(None, 0, owner, Shared, 10),
            Err(LockError::Param(ParamError::OutOfRange {
                name: "owner length",
                ..
            }))
        ));
    }
    let param = |r: Result<_, LockError>| match r {
        Err(LockError::Param(ParamError::OutOfRange { name, .. })) => name,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        param(rw.acquire(None, 0, b"a", Shared, 0, 10).map(|_| ())),
        "ttl"
    );
    assert_eq!(
        param(rw.acquire(None, 0, b"a", Shared, 10, 0).map(|_| ())),
        "wait"
    );
    assert_eq!(rw.release(None, 0, b"a"), Err(LockError::NotHeld));
    assert_eq!(rw.withdraw(None, 0, b"a"), Err(LockError::NotQueued));
}

#[test]
fn the_queue_is_bounded() {
    let lock = RwLease::new(1).unwrap().fair();
    let (_, mut s) = lock
        .try_acquire(None, 0, b"holder", Exclusive, 1_000)
        .unwrap();
    for i in 0..MAX_WAITERS {
        let owner = i.to_be_bytes();
        let (_, next) = lock.acquire(s, 1, &owner, Exclusive, 10, 1_000).unwrap();
        s = next;
    }
    let full = lock.acquire(s.clone(), 1, b"one more", Exclusive, 10, 1_000);
    assert_eq!(full.map(|_| ()), Err(LockError::QueueFull));
    // A try is refused without queueing, so a full queue is no error for it.
    let (tried, _) = lock.try_acquire(s, 1, b"one more", Exclusive, 10).unwrap();
    assert!(!tried.decision.allowed);
}

#[test]
fn the_decoder_refuses_states_no_transition_writes() {
    let fair = RwLease::new(2).unwrap().fair();
    let (_, s) = fair.try_acquire(None, 5, b"a", Shared, 10).unwrap();
    let (_, s) = fair.try_acquire(s, 6, b"b", Shared, 10).unwrap();
    let (_, s) = fair.acquire(s, 7, b"c", Shared, 10, 10).unwrap();
    let bytes = fair.encode_to_vec(&s.unwrap());
    // version, tag, last token and place, counts; two holders, one waiter.
    assert_eq!(&bytes[..2], &[1, 12]);
    assert_eq!(bytes.len(), 2 + 32 + 2 * (40 + 1) + (32 + 1));
    assert_eq!(
        RwLease::new(1).unwrap().fair().decode(&bytes),
        Err(DecodeError::InvalidField { field: "holders" })
    );
    // A reader queued on an unfair lock.
    assert_eq!(
        RwLease::new(2).unwrap().decode(&bytes),
        Err(DecodeError::InvalidField { field: "mode" })
    );
    // A writer beside another holder: the first holder's mode turned exclusive.
    let mut writer = bytes.clone();
    writer[2 + 32 + 31] = 1;
    assert_eq!(
        fair.decode(&writer),
        Err(DecodeError::InvalidField { field: "mode" })
    );
    // The waiter named like a holder.
    let mut twice = bytes.clone();
    let last = twice.len() - 1;
    twice[last] = b'a';
    assert_eq!(
        fair.decode(&twice),
        Err(DecodeError::InvalidField { field: "owner" })
    );
    for len in 0..bytes.len() {
        assert!(fair.decode(&bytes[..len]).is_err());
    }
}
