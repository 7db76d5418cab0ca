use core::borrow::Borrow;
use core::hash::{BuildHasher, Hash};
use core::sync::atomic::{AtomicU64, Ordering};
use std::borrow::ToOwned;
use std::boxed::Box;
use std::collections::hash_map::RandomState;
use std::sync::{Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;
use std::vec::Vec;

use hashbrown::hash_table::{Entry as TableEntry, HashTable};

use super::cell::{publish, WordUnits, MOVING, WIDE};
use super::wait;
use crate::bucket::{Verdict, WordGcra};
use crate::{Algorithm, Clock, Decision, MonotonicClock, Reserve, Ticks};

/// A limit per key (user, IP, route), with memory bounded by a maximum number of keys.
///
/// Keys live in shards, each behind its own read-write lock. A decision on a key
/// already held takes its shard's lock shared and writes the key's own state alone: one
/// compare-and-swap of its 64-bit word for the buckets (decided in the word's units, see
/// [`BucketCell`](super::BucketCell)), the key's own mutex for the other algorithms. Only
/// a new key, a sweep and an eviction take a shard's lock exclusively, so no decision
/// is in flight on an entry they drop. A key whose state is fresh again is dropped: when
/// a decision leaves it fresh, and by a sweep whenever a shard has doubled since its last
/// one. A key spray cannot grow the map past `max_keys`: a shard that is full after
/// sweeping evicts the eighth of its keys closest to fresh (counted in
/// [`evicted`](Self::evicted)); an evicted key starts fresh if it returns. Nothing is
/// ever admitted without being decided.
#[derive(Debug)]
pub struct KeyedLimiter<K, A: Algorithm, C = MonotonicClock, H = RandomState> {
    algorithm: A,
    /// The bucket's arithmetic on each key's word; `None` for the other algorithms.
    units: Option<WordUnits<A::State>>,
    clock: C,
    hasher: H,
    shards: Vec<ShardLock<K, A::State>>,
    /// `log2(shards.len())`.
    shard_bits: u32,
    evicted: AtomicU64,
}

/// A value alone on its cache lines (two, for the prefetcher that fetches lines in
/// pairs): a shard's lock is written by every decision on its keys, and shards packed
/// side by side would make threads deciding keys of different shards take the same
/// line from each other.
#[derive(Debug)]
#[repr(align(128))]
pub(super) struct Padded<T>(pub(super) T);

/// A shard behind its lock, alone on its cache lines.
type ShardLock<K, S> = Padded<RwLock<Shard<K, S>>>;

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
    /// The state as a word of the bucket's units (zero for fresh), or [`WIDE`]: the
    /// state is in `wide` (always, for the algorithms that are not buckets).
    word: AtomicU64,
    /// The instant the state is fresh again, as the last decision saw it: the order of
    /// eviction. Stored under `wide`'s lock, so exact for its states; a word's may lag
    /// behind (two decisions storing theirs in the other order), so a sweep asks the
    /// word itself.
    fresh_at: AtomicU64,
    /// The state where the word does not hold it: set when the key is added, or when a
    /// bucket's state outgrows the word (under the shard's exclusive lock). Boxed, so
    /// that a bucket's entry stays small.
    wide: Option<Box<Mutex<Option<S>>>>,
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
    /// A limiter hashing keys with `hasher` (the default, SipHash with a random key as
    /// governor's, resists hash flooding).
    pub fn with_hasher(algorithm: A, max_keys: usize, clock: C, hasher: H) -> Self {
        let (shard_bits, capacities) = layout(max_keys);
        let shards = capacities
            .map(|capacity| {
                Padded(RwLock::new(Shard {
                    table: HashTable::new(),
                    capacity,
                    sweep_at: MIN_SWEEP.min(capacity),
                }))
            })
            .collect();
        Self {
            units: algorithm.word_units(),
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
        self.update(
            key,
            |units, word, now| units.check(word, now, cost),
            |state, now| self.algorithm.decide(state, now, cost),
        )
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
        let state = read(self.shard(hash))
            .table
            .find(hash, |e| e.key.borrow() == key)
            .and_then(|e| self.state(e));
        self.algorithm.peek(state, now, cost)
    }

    /// Forgets `key`: its next request finds it fresh.
    pub fn reset<Q>(&self, key: &Q)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hasher.hash_one(key);
        if let Ok(entry) = write(self.shard(hash))
            .table
            .find_entry(hash, |e| e.key.borrow() == key)
        {
            entry.remove();
        }
    }

    /// The number of keys held.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| read(&s.0).table.len()).sum()
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
                let mut shard = write(&s.0);
                let before = shard.table.len();
                shard.table.retain(|e| !self.is_fresh(e, now));
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

    fn shard(&self, hash: u64) -> &RwLock<Shard<K, A::State>> {
        &self.shards[shard_index(hash, self.shard_bits)].0
    }

    /// Decides on `key`'s state: with `step` on its word where the algorithm is a bucket
    /// and the operands fit, else with `transition`. A key already held is decided under
    /// its shard's shared lock; only a new key takes it exclusively.
    #[inline]
    fn update<Q>(
        &self,
        key: &Q,
        step: impl Fn(&WordGcra, u64, Ticks) -> Option<(Verdict, u64)>,
        mut transition: impl FnMut(Option<A::State>, Ticks) -> (Decision, Option<A::State>),
    ) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let now = self.clock.now();
        let hash = self.hasher.hash_one(key);
        let shard = self.shard(hash);
        let found = {
            let table = read(shard);
            table
                .table
                .find(hash, |e| e.key.borrow() == key)
                .map(|entry| self.decide_on(entry, now, &step, &mut transition))
        };
        match found.flatten() {
            Some((decision, false)) => return decision,
            // Left fresh: the key may go, which takes the lock exclusively (rare: a
            // decision that changes a state leaves it fresh only at cost zero).
            Some((decision, true)) => {
                let mut shard = write(shard);
                if let Ok(entry) = shard.table.find_entry(hash, |e| e.key.borrow() == key) {
                    if self.state(entry.get()).is_none() {
                        entry.remove();
                    }
                }
                return decision;
            }
            // A new key, or a state that outgrew its word.
            None => {}
        }
        let mut shard = write(shard);
        match shard.table.entry(
            hash,
            |e| e.key.borrow() == key,
            |e| self.hasher.hash_one(&e.key),
        ) {
            // Another thread added the key meanwhile.
            TableEntry::Occupied(mut occupied) => {
                let (decision, fresh) =
                    self.decide_held(occupied.get_mut(), now, &step, &mut transition);
                if fresh {
                    occupied.remove();
                }
                decision
            }
            TableEntry::Vacant(_) => {
                // Decided as it will be stored (on a word, or behind a lock), and stored
                // only if that leaves it other than fresh.
                let mut entry = Entry {
                    key: key.to_owned(),
                    word: AtomicU64::new(if self.units.is_some() { 0 } else { WIDE }),
                    fresh_at: AtomicU64::new(0),
                    wide: match self.units {
                        Some(_) => None,
                        None => Some(Box::new(Mutex::new(None))),
                    },
                };
                let (decision, fresh) = self.decide_held(&mut entry, now, &step, &mut transition);
                if !fresh {
                    let evicted = self.make_room(&mut shard, now);
                    if evicted > 0 {
                        self.evicted.fetch_add(evicted, Ordering::Relaxed);
                    }
                    shard
                        .table
                        .insert_unique(hash, entry, |e| self.hasher.hash_one(&e.key));
                }
                decision
            }
        }
    }

    /// Decides on `entry`'s state in place: on its word with `step` (one
    /// compare-and-swap), else under its own lock with `transition`. Returns the decision
    /// and whether it left the state fresh; `None` where a bucket's state outgrows the
    /// word (see [`decide_held`](Self::decide_held)).
    #[inline(always)]
    fn decide_on(
        &self,
        entry: &Entry<K, A::State>,
        now: Ticks,
        step: &impl Fn(&WordGcra, u64, Ticks) -> Option<(Verdict, u64)>,
        transition: &mut impl FnMut(Option<A::State>, Ticks) -> (Decision, Option<A::State>),
    ) -> Option<(Decision, bool)> {
        if let Some(units) = &self.units {
            let mut current = entry.word.load(Ordering::Acquire);
            while current < MOVING {
                // The verdict and the exact path's decision are kept apart, never wrapped
                // in one value: copying such a value through the stack stalled the loads
                // that read it back (store forwarding), a tenth of a decision's time.
                let (decision, next) =
                    match step(units.gcra(), current, now).filter(|&(_, next)| next < MOVING) {
                        Some((verdict, next)) => match publish(&entry.word, current, next) {
                            Ok(()) => (units.gcra().decision(verdict), next),
                            Err(actual) => {
                                current = actual;
                                continue;
                            }
                        },
                        // An operand does not fit the word's units: the exact path decides.
                        None => {
                            let (decision, next) = transition(units.unpack(current), now);
                            let next = units.pack(next)?;
                            match publish(&entry.word, current, next) {
                                Ok(()) => (decision, next),
                                Err(actual) => {
                                    current = actual;
                                    continue;
                                }
                            }
                        }
                    };
                entry
                    .fresh_at
                    .store(now.saturating_add(decision.reset_after), Ordering::Relaxed);
                return Some((decision, next == 0));
            }
        }
        let wide = entry.wide.as_deref()?;
        Some(Self::decide_wide(wide, &entry.fresh_at, now, transition))
    }

    /// [`decide_on`](Self::decide_on) for a holder of the shard's exclusive lock, which
    /// moves a state that outgrew its word behind the entry's own lock.
    fn decide_held(
        &self,
        entry: &mut Entry<K, A::State>,
        now: Ticks,
        step: &impl Fn(&WordGcra, u64, Ticks) -> Option<(Verdict, u64)>,
        transition: &mut impl FnMut(Option<A::State>, Ticks) -> (Decision, Option<A::State>),
    ) -> (Decision, bool) {
        if let Some(done) = self.decide_on(entry, now, step, transition) {
            return done;
        }
        let word = core::mem::replace(entry.word.get_mut(), WIDE);
        let state = self.units.as_ref().and_then(|units| units.unpack(word));
        let wide = entry.wide.insert(Box::new(Mutex::new(state)));
        Self::decide_wide(wide, &entry.fresh_at, now, transition)
    }

    /// Decides on a state behind its entry's lock, storing when it is fresh again before
    /// unlocking (so that instant is exact for such states).
    fn decide_wide(
        wide: &Mutex<Option<A::State>>,
        fresh_at: &AtomicU64,
        now: Ticks,
        transition: &mut impl FnMut(Option<A::State>, Ticks) -> (Decision, Option<A::State>),
    ) -> (Decision, bool) {
        let mut state = lock(wide);
        let (decision, next) = transition(state.take(), now);
        let fresh = next.is_none();
        *state = next;
        fresh_at.store(now.saturating_add(decision.reset_after), Ordering::Relaxed);
        (decision, fresh)
    }

    /// `entry`'s state.
    fn state(&self, entry: &Entry<K, A::State>) -> Option<A::State> {
        match (entry.word.load(Ordering::Acquire), &self.units) {
            (word, Some(units)) if word < MOVING => units.unpack(word),
            _ => entry.wide.as_deref().and_then(|wide| lock(wide).clone()),
        }
    }

    /// Whether `entry`'s state is fresh at `now`, for a holder of its shard's exclusive
    /// lock (no decision in flight): a word says it itself (a request of cost zero on it
    /// leaves it zero), a state behind its lock by the instant stored with it.
    fn is_fresh(&self, entry: &Entry<K, A::State>, now: Ticks) -> bool {
        let word = entry.word.load(Ordering::Acquire);
        match &self.units {
            Some(units) if word < MOVING => match units.gcra().check(word, now, 0) {
                Some((_, next)) => next == 0,
                None => self.algorithm.peek(units.unpack(word), now, 0).reset_after == 0,
            },
            _ => entry.fresh_at.load(Ordering::Relaxed) <= now,
        }
    }

    /// Makes room in `shard` for one more key, returning how many live keys it evicted.
    fn make_room(&self, shard: &mut Shard<K, A::State>, now: Ticks) -> u64 {
        if shard.table.len() < shard.sweep_at {
            return 0;
        }
        shard.table.retain(|e| !self.is_fresh(e, now));
        let mut evicted = 0;
        if shard.table.len() >= shard.capacity {
            // Evict the eighth (at least one) closest to fresh, so the scan is paid once
            // per many insertions.
            let count = (shard.table.len() / 8).max(1);
            let fresh_at = |e: &Entry<K, A::State>| e.fresh_at.load(Ordering::Relaxed);
            let mut times: Vec<Ticks> = shard.table.iter().map(fresh_at).collect();
            let (_, &mut threshold, _) = times.select_nth_unstable(count - 1);
            let mut at_threshold = count - times.iter().filter(|&&t| t < threshold).count();
            shard.table.retain(|e| {
                let t = fresh_at(e);
                if t < threshold {
                    false
                } else if t == threshold && at_threshold > 0 {
                    at_threshold -= 1;
                    false
                } else {
                    true
                }
            });
            evicted = count as u64;
        }
        shard.sweep_at = (2 * shard.table.len()).max(MIN_SWEEP).min(shard.capacity);
        evicted
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
        self.update(
            key,
            |units, word, now| units.decide(word, now, cost, max_wait),
            |state, now| self.algorithm.reserve(state, now, cost, max_wait),
        )
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

fn read<T>(lock: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(PoisonError::into_inner)
}

fn write<T>(lock: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(PoisonError::into_inner)
}

pub(super) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Decisions do not panic, but a poisoned lock must not turn every later request
    // into a panic either.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
