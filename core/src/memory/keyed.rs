use core::borrow::Borrow;
use core::hash::{BuildHasher, Hash};
use core::sync::atomic::{AtomicU64, Ordering};
use std::borrow::ToOwned;
use std::collections::hash_map::RandomState;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use std::vec::Vec;

use hashbrown::hash_table::{Entry as TableEntry, HashTable};

use super::wait;
use crate::{Algorithm, Clock, Decision, MonotonicClock, Reserve, Ticks};

/// A limit per key (user, IP, route), with memory bounded by a maximum number of keys.
///
/// Keys live in shards, each behind its own mutex, so threads deciding different keys
/// rarely meet. A key whose state is fresh again is dropped: at once when a decision
/// leaves it fresh, and by a sweep whenever a shard has doubled since its last one. A
/// key spray cannot grow the map past `max_keys`: a shard that is full after sweeping
/// evicts the eighth of its keys closest to fresh (counted in
/// [`evicted`](Self::evicted)); an evicted key starts fresh if it returns. Nothing is
/// ever admitted without being decided.
#[derive(Debug)]
pub struct KeyedLimiter<K, A: Algorithm, C = MonotonicClock, H = RandomState> {
    algorithm: A,
    clock: C,
    hasher: H,
    shards: Vec<ShardLock<K, A::State>>,
    /// `log2(shards.len())`.
    shard_bits: u32,
    evicted: AtomicU64,
}

/// A value alone on its cache lines (two, for the prefetcher that fetches lines in
/// pairs): a shard's lock and table are written by every decision on its keys, and
/// shards packed side by side would make threads deciding keys of different shards
/// take the same line from each other.
#[derive(Debug)]
#[repr(align(128))]
pub(super) struct Padded<T>(pub(super) T);

/// A shard behind its lock, alone on its cache lines.
type ShardLock<K, S> = Padded<Mutex<Shard<K, S>>>;

#[derive(Debug)]
struct Shard<K, S> {
    table: HashTable<Entry<K, S>>,
    /// The most keys this shard holds.
    capacity: usize,
    /// Sweep fresh keys when the table reaches this length.
    sweep_at: usize,
}

/// No hash is kept: rehashing the key when the table grows is cheaper than a smaller
/// share of the cache for every lookup.
#[derive(Debug)]
struct Entry<K, S> {
    key: K,
    /// `Some` while stored; taken out for the duration of a decision.
    state: Option<S>,
    /// The instant the state is fresh again.
    fresh_at: Ticks,
}

/// Shards never sweep below this many keys: small tables are cheap to keep.
pub(super) const MIN_SWEEP: usize = 64;

impl<K: Hash + Eq, A: Algorithm> KeyedLimiter<K, A> {
    /// A limiter holding at most `max_keys` keys (at least one), on the process's
    /// [`MonotonicClock`].
    pub fn new(algorithm: A, max_keys: usize) -> Self {
        Self::with_clock(algorithm, max_keys, MonotonicClock::new())
    }
}

impl<K: Hash + Eq, A: Algorithm, C: Clock> KeyedLimiter<K, A, C> {
    /// A limiter reading `clock`.
    pub fn with_clock(algorithm: A, max_keys: usize, clock: C) -> Self {
        Self::with_hasher(algorithm, max_keys, clock, RandomState::new())
    }
}

impl<K: Hash + Eq, A: Algorithm, C: Clock, H: BuildHasher> KeyedLimiter<K, A, C, H> {
    /// A limiter hashing keys with `hasher` (the default resists hash flooding).
    pub fn with_hasher(algorithm: A, max_keys: usize, clock: C, hasher: H) -> Self {
        let (shard_bits, capacities) = layout(max_keys);
        let shards = capacities
            .map(|capacity| {
                Padded(Mutex::new(Shard {
                    table: HashTable::new(),
                    capacity,
                    sweep_at: MIN_SWEEP.min(capacity),
                }))
            })
            .collect();
        Self {
            algorithm,
            clock,
            hasher,
            shards,
            shard_bits,
            evicted: AtomicU64::new(0),
        }
    }

    /// Decides a request of `cost` for `key` now: the "reject" strategy.
    pub fn check<Q>(&self, key: &Q, cost: u64) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.update(key, |state, now| self.algorithm.decide(state, now, cost))
    }

    /// Runs `admitted` if a request of `cost` for `key` is admitted now, else `denied`
    /// with the decision: the "degrade" strategy.
    pub fn check_or_else<Q, T>(
        &self,
        key: &Q,
        cost: u64,
        admitted: impl FnOnce() -> T,
        denied: impl FnOnce(Decision) -> T,
    ) -> T
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        wait::degrade(self.check(key, cost), admitted, denied)
    }

    /// What a request of `cost` for `key` would get now, changing nothing.
    pub fn peek<Q>(&self, key: &Q, cost: u64) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let now = self.clock.now();
        let hash = self.hasher.hash_one(key);
        let shard = self.shard(hash);
        let state = shard
            .table
            .find(hash, |e| e.key.borrow() == key)
            .and_then(|e| e.state.clone());
        self.algorithm.peek(state, now, cost)
    }

    /// Forgets `key`: its next request finds it fresh.
    pub fn reset<Q>(&self, key: &Q)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hasher.hash_one(key);
        if let Ok(entry) = self
            .shard(hash)
            .table
            .find_entry(hash, |e| e.key.borrow() == key)
        {
            entry.remove();
        }
    }

    /// The number of keys held.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| lock(&s.0).table.len()).sum()
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops every key whose state is fresh now, returning how many were dropped.
    pub fn sweep(&self) -> usize {
        let now = self.clock.now();
        self.shards
            .iter()
            .map(|s| {
                let mut shard = lock(&s.0);
                let before = shard.table.len();
                shard.table.retain(|e| e.fresh_at > now);
                before - shard.table.len()
            })
            .sum()
    }

    /// The number of shards; each holds at most its share of `max_keys`.
    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// Keys evicted before their state was fresh, because the limiter was full.
    pub fn evicted(&self) -> u64 {
        self.evicted.load(Ordering::Relaxed)
    }

    /// The algorithm deciding.
    pub const fn algorithm(&self) -> &A {
        &self.algorithm
    }

    /// The clock read for every decision.
    pub const fn clock(&self) -> &C {
        &self.clock
    }

    fn shard(&self, hash: u64) -> MutexGuard<'_, Shard<K, A::State>> {
        lock(&self.shards[shard_index(hash, self.shard_bits)].0)
    }

    /// Applies `transition` to `key`'s state under its shard's lock.
    fn update<Q>(
        &self,
        key: &Q,
        transition: impl FnOnce(Option<A::State>, Ticks) -> (Decision, Option<A::State>),
    ) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let now = self.clock.now();
        let hash = self.hasher.hash_one(key);
        let mut shard = self.shard(hash);
        let fresh_at = |d: &Decision| now.saturating_add(d.reset_after);
        match shard.table.entry(
            hash,
            |e| e.key.borrow() == key,
            |e| self.hasher.hash_one(&e.key),
        ) {
            TableEntry::Occupied(mut occupied) => {
                let entry = occupied.get_mut();
                let (decision, next) = transition(entry.state.take(), now);
                match next {
                    Some(state) => {
                        entry.state = Some(state);
                        entry.fresh_at = fresh_at(&decision);
                    }
                    None => {
                        occupied.remove();
                    }
                }
                decision
            }
            TableEntry::Vacant(_) => {
                let (decision, next) = transition(None, now);
                if let Some(state) = next {
                    let evicted = shard.make_room(now);
                    if evicted > 0 {
                        self.evicted.fetch_add(evicted, Ordering::Relaxed);
                    }
                    let entry = Entry {
                        key: key.to_owned(),
                        state: Some(state),
                        fresh_at: fresh_at(&decision),
                    };
                    shard
                        .table
                        .insert_unique(hash, entry, |e| self.hasher.hash_one(&e.key));
                }
                decision
            }
        }
    }
}

impl<K: Hash + Eq, A: Reserve, C: Clock, H: BuildHasher> KeyedLimiter<K, A, C, H> {
    /// Books a slot for `cost` for `key` if it can act within `max_wait` ticks; the
    /// decision's `delay` says how long the caller must wait before acting.
    pub fn reserve<Q>(&self, key: &Q, cost: u64, max_wait: Ticks) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.update(key, |state, now| {
            self.algorithm.reserve(state, now, cost, max_wait)
        })
    }

    /// Waits in line for `key`: books a slot within `timeout` and sleeps once until it,
    /// or returns the denial at once. Blocks the thread.
    pub fn acquire<Q>(&self, key: &Q, cost: u64, timeout: Duration) -> Result<Decision, Decision>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        wait::blocking(self.reserve(key, cost, wait::ticks(timeout)))
    }

    /// [`acquire`](Self::acquire) as a future, sleeping on the tokio timer. Dropping the
    /// future after it has booked its slot gives the slot up unused.
    #[cfg(feature = "tokio")]
    pub async fn acquire_async<Q>(
        &self,
        key: &Q,
        cost: u64,
        timeout: Duration,
    ) -> Result<Decision, Decision>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        wait::sleep(self.reserve(key, cost, wait::ticks(timeout))).await
    }
}

impl<K, S> Shard<K, S> {
    /// Makes room for one more key, returning how many live keys it evicted.
    fn make_room(&mut self, now: Ticks) -> u64 {
        if self.table.len() < self.sweep_at {
            return 0;
        }
        self.table.retain(|e| e.fresh_at > now);
        let mut evicted = 0;
        if self.table.len() >= self.capacity {
            // Evict the eighth (at least one) closest to fresh, so the scan is paid once
            // per many insertions.
            let count = (self.table.len() / 8).max(1);
            let mut times: Vec<Ticks> = self.table.iter().map(|e| e.fresh_at).collect();
            let (_, &mut threshold, _) = times.select_nth_unstable(count - 1);
            let mut at_threshold = count - times.iter().filter(|&&t| t < threshold).count();
            self.table.retain(|e| {
                if e.fresh_at < threshold {
                    false
                } else if e.fresh_at == threshold && at_threshold > 0 {
                    at_threshold -= 1;
                    false
                } else {
                    true
                }
            });
            evicted = count as u64;
        }
        self.sweep_at = (2 * self.table.len()).max(MIN_SWEEP).min(self.capacity);
        evicted
    }
}

/// How `max_keys` (at least one) are split into shards: about four shards per core and
/// never more shards than keys. Returns `log2` of the shard count and each one's capacity.
pub(super) fn layout(max_keys: usize) -> (u32, impl Iterator<Item = usize>) {
    let max_keys = max_keys.max(1);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let wanted = (4 * cores).next_power_of_two().min(max_keys);
    let shard_bits = usize::BITS - 1 - wanted.leading_zeros();
    let count = 1usize << shard_bits;
    let capacities = (0..count).map(move |i| max_keys / count + usize::from(i < max_keys % count));
    (shard_bits, capacities)
}

/// The shard of a key hashed to `hash`, among `1 << shard_bits`.
pub(super) fn shard_index(hash: u64, shard_bits: u32) -> usize {
    // The table indexes by the low bits and tags by the top seven; shard by the bits
    // just below those, so neither loses entropy.
    if shard_bits == 0 {
        0
    } else {
        usize::try_from((hash << 7) >> (64 - shard_bits)).unwrap_or(0)
    }
}

pub(super) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Decisions do not panic, but a poisoned lock must not turn every later request
    // into a panic either.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
