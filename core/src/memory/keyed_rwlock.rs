//! The lock family per key, for hosts whose callers hold leases and places across
//! calls (a service): every call answered at once, none blocking.

use core::fmt;
use core::hash::BuildHasher;
use std::sync::{Mutex, MutexGuard};
use std::vec::Vec;

use super::keyed::time;
use super::lease_table::{advance, Entry, Locked, Shard, Shards};
use super::KeyHasher;
use crate::rwlock::{LockError, LockMode, RwAcquired, RwLease, RwState};
use crate::{Clock, Decision, Grant, LeaseRequest, MonotonicClock, Ticks};

/// An [`RwLease`] lock per byte key, holding at most `max_keys` keys: the owners of
/// leases and queue places ask again by name (the leases' [`LeaseRequest`]), as on the
/// Redis and etcd hosts.
///
/// ```
/// use sluicegate_core::memory::KeyedRwLeases;
/// use sluicegate_core::rwlock::{LockMode, RwLease};
/// use sluicegate_core::{LeaseRequest, SECOND};
///
/// let locks = KeyedRwLeases::new(RwLease::read_write().fair(), 10_000);
/// let reader = LeaseRequest::new(b"report-7").owner(b"reader").ttl(30 * SECOND);
/// assert!(locks.acquire(&reader, LockMode::Shared, None)?.grant.is_some());
/// // A writer is refused and, asked to wait, takes the first place in the queue.
/// let writer = LeaseRequest::new(b"report-7").owner(b"writer").ttl(30 * SECOND);
/// let asked = locks.acquire(&writer, LockMode::Exclusive, Some(5 * SECOND))?;
/// assert_eq!(asked.place.map(|p| p.ahead), Some(0));
/// locks.release(&reader)?;
/// assert!(locks.acquire(&writer, LockMode::Exclusive, Some(5 * SECOND))?.grant.is_some());
/// # Ok::<(), sluicegate_core::rwlock::LockError>(())
/// ```
///
/// A request with its own `now` acts at that time, one without at the clock's; a key
/// acted on at both acts at the later of the two, so a token never repeats. A key is
/// dropped once its state is fresh; a key in use is never evicted, so a table full of
/// keys in use refuses a new key (a denial, counted by [`refused`](Self::refused))
/// until one is fresh.
pub struct KeyedRwLeases<C = MonotonicClock, H = KeyHasher> {
    lock: RwLease,
    clock: C,
    hasher: H,
    shards: Shards<Mutex<Shard<Vec<u8>, RwState>>>,
}

impl KeyedRwLeases {
    /// `lock` per key, at most `max_keys` keys (at least one), on the process's
    /// [`MonotonicClock`].
    pub fn new(lock: RwLease, max_keys: usize) -> Self {
        Self::with_clock(lock, max_keys, MonotonicClock::new())
    }
}

impl<C: Clock + Sync> KeyedRwLeases<C> {
    /// `lock` per key whose expiries are read on `clock`.
    pub fn with_clock(lock: RwLease, max_keys: usize, clock: C) -> Self {
        Self::with_hasher(lock, max_keys, clock, KeyHasher::default())
    }
}

impl<C: Clock + Sync, H: BuildHasher + Sync> KeyedRwLeases<C, H> {
    /// `lock` per key, hashing keys with `hasher`.
    pub fn with_hasher(lock: RwLease, max_keys: usize, clock: C, hasher: H) -> Self {
        Self {
            lock,
            clock,
            hasher,
            shards: Shards::new(max_keys, Mutex::new),
        }
    }

    /// Grants the request's owner a lease in `mode`, or denies it and, with a `wait`,
    /// queues it in a place lasting `wait` ticks ([`RwLease::acquire`]); without one, a
    /// try that never queues ([`RwLease::try_acquire`]).
    pub fn acquire(
        &self,
        request: &LeaseRequest<'_>,
        mode: LockMode,
        wait: Option<Ticks>,
    ) -> Result<RwAcquired, LockError> {
        let LeaseRequest { owner, ttl, .. } = *request;
        let step = |lock: &RwLease, state: &mut RwState, now| match wait {
            Some(wait) => lock.acquire_in(state, now, owner, mode, ttl, wait),
            None => lock.try_acquire_in(state, now, owner, mode, ttl),
        };
        self.apply(request, step, |retry| {
            self.shards.refuse();
            let full = Decision::deny(self.lock.max_holders(), 0, Some(retry), 0);
            Ok(RwAcquired::new(full, None, None))
        })
    }

    /// Releases the owner's lease once ([`RwLease::release`]).
    pub fn release(&self, request: &LeaseRequest<'_>) -> Result<Grant, LockError> {
        self.held(request, |lock, state, now| {
            lock.release_in(state, now, request.owner)
        })
    }

    /// Extends the owner's unexpired lease to the request's ttl from now
    /// ([`RwLease::renew`]).
    pub fn renew(&self, request: &LeaseRequest<'_>) -> Result<Grant, LockError> {
        let LeaseRequest { owner, ttl, .. } = *request;
        self.held(request, |lock, state, now| {
            lock.renew_in(state, now, owner, ttl)
        })
    }

    /// Turns the owner's lease shared, keeping its token ([`RwLease::downgrade`]).
    pub fn downgrade(&self, request: &LeaseRequest<'_>) -> Result<Grant, LockError> {
        self.held(request, |lock, state, now| {
            lock.downgrade_in(state, now, request.owner)
        })
    }

    /// Gives up the owner's place in the queue ([`RwLease::withdraw`]).
    pub fn withdraw(&self, request: &LeaseRequest<'_>) -> Result<(), LockError> {
        self.held(request, |lock, state, now| {
            lock.withdraw_in(state, now, request.owner)
        })
    }

    /// `key`'s holders and queue now, `None` if it is fresh.
    pub fn state(&self, key: &[u8]) -> Option<RwState> {
        let hash = self.hasher.hash_one(key);
        let shard = self.shard(hash);
        let entry = shard.table.find(hash, |e| e.key == key)?;
        Some(entry.state.clone())
    }

    /// The number of keys held.
    pub fn len(&self) -> usize {
        self.shards.len()
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The most keys held at once: `max_keys` (at least one), split among the shards.
    pub const fn capacity(&self) -> usize {
        self.shards.capacity()
    }

    /// New keys refused because their shard was full of keys in use.
    pub fn refused(&self) -> u64 {
        self.shards.refused()
    }

    /// Drops every key whose state is fresh now, returning how many were dropped.
    pub fn sweep(&self) -> usize {
        self.shards.sweep(self.clock.now())
    }

    /// The lock each key has.
    pub const fn lease(&self) -> &RwLease {
        &self.lock
    }

    /// The clock expiries are read on.
    pub const fn clock(&self) -> &C {
        &self.clock
    }

    fn shard(&self, hash: u64) -> MutexGuard<'_, Shard<Vec<u8>, RwState>> {
        self.shards.of(hash).locked()
    }

    /// A change to what the owner holds or where it waits: a key not stored is
    /// refused by the transition itself.
    fn held<T>(
        &self,
        request: &LeaseRequest<'_>,
        step: impl FnOnce(&RwLease, &mut RwState, Ticks) -> Result<T, LockError>,
    ) -> Result<T, LockError> {
        // Only an acquire stores a new key, so a table never lacks room here.
        self.apply(request, step, |_| Err(LockError::NotHeld))
    }

    /// Runs `step` on the request's key at its time, in place (a refused step leaves
    /// the state as it was); drops the key if that leaves it fresh. A step that would
    /// store a new key in a shard full of keys in use is undone and answered by `full`
    /// with the time until a key is fresh.
    fn apply<T>(
        &self,
        request: &LeaseRequest<'_>,
        step: impl FnOnce(&RwLease, &mut RwState, Ticks) -> Result<T, LockError>,
        full: impl FnOnce(Ticks) -> Result<T, LockError>,
    ) -> Result<T, LockError> {
        let key = request.key;
        let read = time(request.now, &self.clock)?;
        let hash = self.hasher.hash_one(key);
        let mut shard = self.shard(hash);
        let now = advance(&mut shard.now, read);
        if let Ok(mut entry) = shard.table.find_entry(hash, |e| e.key == key) {
            let answer = step(&self.lock, &mut entry.get_mut().state, now);
            // An error left the state as it was.
            if answer.is_ok() {
                let fresh_at = entry.get().state.fresh_at();
                if entry.get().state.is_fresh(now) {
                    entry.remove();
                } else {
                    // A release can bring the key's end forward.
                    shard.ends_by(fresh_at);
                }
            }
            return answer;
        }
        let mut state = RwState::default();
        let answer = step(&self.lock, &mut state, now);
        if answer.is_err() || state.is_fresh(now) {
            return answer;
        }
        if let Err(retry) = shard.make_room(now) {
            return full(retry);
        }
        let key = key.to_vec();
        let entry = Entry { hash, key, state };
        shard.table.insert_unique(hash, entry, |e| e.hash);
        answer
    }
}

impl<C, H> fmt::Debug for KeyedRwLeases<C, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedRwLeases")
            .field("lock", &self.lock)
            .field("shards", &self.shards.count())
            .finish_non_exhaustive()
    }
}
