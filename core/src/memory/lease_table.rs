//! The shards both keyed lease hosts keep their keys in: a key is dropped once its
//! state is fresh, and a key in use is never evicted.

use core::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::vec::Vec;

use hashbrown::hash_table::HashTable;

use super::keyed::{layout, lock, shard_index};
use crate::rwlock::RwState;
use crate::{LeaseState, Ticks};

/// Shards never sweep below this many keys: small tables are cheap to keep.
const MIN_SWEEP: usize = 64;

/// `read` from the clock, but never earlier than `latest`, the latest time a table (or a
/// shard of tables) already used, which it becomes: two threads read the clock in one
/// order and lock in the other, and a token derived from the earlier reading could
/// repeat one granted before a deletion.
pub(super) fn advance(latest: &mut Ticks, read: Ticks) -> Ticks {
    *latest = (*latest).max(read);
    *latest
}

/// A key's state that a table may forget once it is fresh.
pub(super) trait Expiring {
    /// The instant the state is fresh.
    fn fresh_at(&self) -> Ticks;
    /// Whether the state is fresh at `now`.
    fn is_fresh(&self, now: Ticks) -> bool;
}

impl Expiring for LeaseState {
    fn fresh_at(&self) -> Ticks {
        LeaseState::fresh_at(self)
    }

    fn is_fresh(&self, now: Ticks) -> bool {
        LeaseState::is_fresh(self, now)
    }
}

impl Expiring for RwState {
    fn fresh_at(&self) -> Ticks {
        RwState::fresh_at(self)
    }

    fn is_fresh(&self, now: Ticks) -> bool {
        RwState::is_fresh(self, now)
    }
}

#[derive(Debug)]
pub(super) struct Shard<K, S> {
    pub(super) table: HashTable<Entry<K, S>>,
    /// The latest time a transition in this shard used (see [`advance`]).
    pub(super) now: Ticks,
    capacity: usize,
    /// Sweep fresh keys when the table reaches this length.
    sweep_at: usize,
    /// No key is fresh before this instant: a full table refuses a new key without a
    /// sweep until then. Set by the sweep that found the table full; a state left with
    /// an earlier end (a release) lowers it, and a key that goes unfills the table.
    full_until: Ticks,
}

#[derive(Debug)]
pub(super) struct Entry<K, S> {
    pub(super) hash: u64,
    pub(super) key: K,
    pub(super) state: S,
}

impl<K, S: Expiring> Shard<K, S> {
    pub(super) fn new(capacity: usize) -> Self {
        Self {
            table: HashTable::new(),
            now: 0,
            capacity,
            sweep_at: MIN_SWEEP.min(capacity),
            full_until: 0,
        }
    }

    /// Makes room for one more key if keys that are fresh can go; otherwise the time
    /// until the earliest key is fresh, found by one sweep and then remembered.
    pub(super) fn make_room(&mut self, now: Ticks) -> Result<(), Ticks> {
        if self.table.len() < self.sweep_at {
            return Ok(());
        }
        if self.table.len() >= self.capacity && now < self.full_until {
            return Err(self.full_until - now);
        }
        self.table.retain(|e| !e.state.is_fresh(now));
        self.sweep_at = (2 * self.table.len()).max(MIN_SWEEP).min(self.capacity);
        if self.table.len() < self.capacity {
            return Ok(());
        }
        // Full of keys in use, each fresh after `now` (a capacity is at least one).
        let earliest = self.table.iter().map(|e| e.state.fresh_at()).min();
        self.full_until = earliest.unwrap_or(now).max(now.saturating_add(1));
        Err(self.full_until - now)
    }

    /// A state left ending at `fresh_at` (a release) may unfill the table sooner.
    pub(super) fn ends_by(&mut self, fresh_at: Ticks) {
        self.full_until = self.full_until.min(fresh_at);
    }

    /// Drops every key fresh at `read` (or the shard's later time); how many went.
    pub(super) fn sweep(&mut self, read: Ticks) -> usize {
        let now = advance(&mut self.now, read);
        let before = self.table.len();
        self.table.retain(|e| !e.state.is_fresh(now));
        before - self.table.len()
    }
}

/// A shard behind its lock: a plain mutex, or one with waiters.
pub(super) trait Locked {
    type Shard;
    fn locked(&self) -> MutexGuard<'_, Self::Shard>;
}

impl<T> Locked for Mutex<T> {
    type Shard = T;
    fn locked(&self) -> MutexGuard<'_, T> {
        lock(self)
    }
}

/// A keyed host's shards, its capacity and its refusals of new keys.
pub(super) struct Shards<W> {
    shards: Vec<W>,
    /// `log2(shards.len())`.
    bits: u32,
    /// The sum of the shards' capacities.
    capacity: usize,
    refused: AtomicU64,
}

impl<K, S: Expiring, W: Locked<Shard = Shard<K, S>>> Shards<W> {
    /// At most `max_keys` keys (at least one), each shard made by `wrap`.
    pub(super) fn new(max_keys: usize, wrap: impl Fn(Shard<K, S>) -> W) -> Self {
        let (bits, capacities) = layout(max_keys);
        Self {
            shards: capacities.map(|c| wrap(Shard::new(c))).collect(),
            bits,
            capacity: max_keys.max(1),
            refused: AtomicU64::new(0),
        }
    }

    /// The shard of a key hashed to `hash`.
    pub(super) fn of(&self, hash: u64) -> &W {
        &self.shards[shard_index(hash, self.bits)]
    }

    pub(super) fn len(&self) -> usize {
        self.shards.iter().map(|s| s.locked().table.len()).sum()
    }

    pub(super) const fn capacity(&self) -> usize {
        self.capacity
    }

    pub(super) fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Counts a new key refused because its shard was full of keys in use.
    pub(super) fn refuse(&self) {
        self.refused.fetch_add(1, Ordering::Relaxed);
    }

    /// Drops every key fresh at `read`; how many went.
    pub(super) fn sweep(&self, read: Ticks) -> usize {
        self.shards.iter().map(|s| s.locked().sweep(read)).sum()
    }

    pub(super) fn count(&self) -> usize {
        self.shards.len()
    }
}
