use core::borrow::Borrow;
use core::hash::{BuildHasher, Hash};
use core::sync::atomic::{AtomicU64, Ordering};
use std::borrow::ToOwned;
use std::sync::{Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;
use std::vec::Vec;

use hashbrown::hash_table::{Entry as TableEntry, HashTable};

use super::cell::{publish, WordUnits};
use super::word::{Verdict, WordGcra};
use super::InMemory;
use super::{wait, KeyHasher};
use crate::{
    check_now, Algorithm, Clock, Decision, Limiter, MonotonicClock, ParamError, Request, Reserve,
    Ticks,
};

mod budget;
mod report;
mod room;
mod seed;

pub use room::OnFull;

/// A limit per key (user, IP, route), with memory bounded by a maximum number of keys.
///
/// Keys live in shards, each behind its own read-write lock. A key's entry is the key and
/// one 64-bit word (16 bytes for a `u64` key). A decision on a key already held takes its
/// shard's lock shared and writes the key's own state alone: one compare-and-swap of its
/// word for the buckets (decided in the word's units, see
/// `BucketCell`), for the other algorithms the mutex of the state
/// the word points to. Only a new key, a sweep and an eviction take a shard's lock
/// exclusively, so no decision is in flight on an entry they drop. A key whose state is
/// fresh again is dropped when a decision leaves it fresh, else when its shard is full
/// (or by [`sweep`](Self::sweep)). A key spray cannot grow the map past `max_keys`: a
/// full shard that has less than an eighth free after dropping its fresh keys evicts
/// keys until an eighth is (counted in [`evicted`](Self::evicted)): first the keys that
/// would admit a request now, never one that would refuse it while such a key is left,
/// then as [`OnFull`] says (by default a new key is refused, counted in
/// [`refused`](Self::refused)); an evicted key starts fresh if it returns. Nothing is
/// ever admitted without being decided. [`max_keys_within`](Self::max_keys_within)
/// turns a memory budget into `max_keys`.
#[derive(Debug)]
pub struct KeyedLimiter<K, A: Algorithm, C = MonotonicClock, H = KeyHasher> {
    algorithm: A,
    /// The bucket's arithmetic on each key's word; `None` for the other algorithms.
    units: Option<WordUnits<A::State>>,
    clock: C,
    hasher: H,
    shards: Vec<ShardLock<K, A::State>>,
    /// `log2(shards.len())`.
    shard_bits: u32,
    on_full: OnFull,
    /// The sum of the shards' capacities.
    capacity: usize,
    evicted: AtomicU64,
    refused: AtomicU64,
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
    table: HashTable<Entry<K>>,
    /// The states that are not in their entry's word.
    wide: WideStates<S>,
    /// The most keys this shard holds.
    capacity: usize,
    /// Under [`OnFull::DenyNew`], after a sweep that found too few keys to forget: no
    /// key held then admits before this instant, so a full shard refuses a new key
    /// without another sweep until then.
    frees_at: Ticks,
}

/// A key and its state's word. No hash is kept: rehashing the key when the table grows
/// is cheaper than a smaller share of the cache for every lookup, and the entry is as
/// small as governor's (a lookup's second cache miss is the entry's line).
#[derive(Debug)]
struct Entry<K> {
    key: K,
    /// A bucket's state as a word of its units (zero for fresh) if below [`WIDE_FROM`],
    /// else `WIDE_FROM + i`: the state is the shard's `wide` state `i` (always, for the
    /// algorithms that are not buckets; for a bucket whose state outgrew the word).
    word: AtomicU64,
}

/// The first word that names a wide state rather than holding a bucket's: a bucket's
/// word reaches it only past the year 2554 for the densest units (then decided on the
/// exact path, as any state that outgrows the word), and a shard could not hold 2^40
/// wide states.
const WIDE_FROM: u64 = u64::MAX - (1 << 40);

/// A shard's states that are not in a word, each behind its own mutex, and the slots
/// free for reuse. Slots are taken and freed under the shard's exclusive lock only.
#[derive(Debug)]
struct WideStates<S> {
    slots: Vec<WideState<S>>,
    free: Vec<usize>,
}

#[derive(Debug)]
struct WideState<S> {
    state: Mutex<Option<S>>,
    /// The instant the state is fresh again, stored under `state`'s lock: the order of
    /// eviction.
    fresh_at: AtomicU64,
}

impl<K, S> Shard<K, S> {
    /// Keeps the entries `keep` accepts, freeing the wide states of the others.
    fn retain(&mut self, mut keep: impl FnMut(&Entry<K>, &WideStates<S>) -> bool) {
        let mut released = Vec::new();
        self.table.retain(|e| {
            let kept = keep(e, &self.wide);
            if !kept && *e.word.get_mut() >= WIDE_FROM {
                released.push(*e.word.get_mut());
            }
            kept
        });
        for word in released {
            self.wide.release(word);
        }
    }
}

impl<S> WideStates<S> {
    const fn new() -> Self {
        Self {
            slots: Vec::new(),
            free: Vec::new(),
        }
    }

    /// The state a word names; `None` for a word that names none.
    fn get(&self, word: u64) -> Option<&WideState<S>> {
        let index = usize::try_from(word.checked_sub(WIDE_FROM)?).ok()?;
        self.slots.get(index)
    }

    /// A slot holding `state`, and the word that names it.
    fn add(&mut self, state: Option<S>) -> (u64, &WideState<S>) {
        let index = match self.free.pop() {
            Some(index) if index < self.slots.len() => index,
            _ => {
                self.slots.push(WideState {
                    state: Mutex::new(None),
                    fresh_at: AtomicU64::new(0),
                });
                self.slots.len() - 1
            }
        };
        // Below the length: checked above, or just pushed.
        let slot = &mut self.slots[index];
        *slot.state.get_mut().unwrap_or_else(PoisonError::into_inner) = state;
        (WIDE_FROM + index as u64, slot)
    }

    /// Frees the slot an entry's `word` names, if it names one: its entry is dropped.
    fn release(&mut self, word: u64) {
        let Some(index) = word
            .checked_sub(WIDE_FROM)
            .and_then(|i| usize::try_from(i).ok())
        else {
            return;
        };
        if let Some(slot) = self.slots.get_mut(index) {
            *slot.state.get_mut().unwrap_or_else(PoisonError::into_inner) = None;
            self.free.push(index);
        }
    }
}

impl<K: Hash + Eq, A: InMemory> KeyedLimiter<K, A> {
    /// A limiter holding at most `max_keys` keys (at least one), on the process's
    /// [`MonotonicClock`].
    pub fn new(algorithm: A, max_keys: usize) -> Self {
        Self::with_clock(algorithm, max_keys, MonotonicClock::new())
    }
}

impl<K: Hash + Eq, A: InMemory, C: Clock> KeyedLimiter<K, A, C> {
    /// A limiter reading `clock`.
    pub fn with_clock(algorithm: A, max_keys: usize, clock: C) -> Self {
        Self::with_hasher(algorithm, max_keys, clock, KeyHasher::default())
    }
}

impl<K: Hash + Eq, A: InMemory, C: Clock, H: BuildHasher> KeyedLimiter<K, A, C, H> {
    /// A limiter hashing keys with `hasher` (the default is [`KeyHasher`]).
    pub fn with_hasher(algorithm: A, max_keys: usize, clock: C, hasher: H) -> Self {
        let (shard_bits, capacities) = layout(max_keys);
        let shards = capacities
            .map(|capacity| {
                Padded(RwLock::new(Shard {
                    table: HashTable::new(),
                    wide: WideStates::new(),
                    capacity,
                    frees_at: 0,
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
            on_full: OnFull::default(),
            capacity: max_keys.max(1),
            evicted: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        }
    }

    /// What a full shard does when only keys that would refuse a request are left to
    /// forget (the default is [`OnFull::DenyNew`], see there why).
    #[must_use]
    pub fn on_full(mut self, on_full: OnFull) -> Self {
        self.on_full = on_full;
        self
    }
}

impl<K: Hash + Eq, A: Algorithm, C: Clock, H: BuildHasher> KeyedLimiter<K, A, C, H> {
    /// Decides a request of `cost` for `key` now: the "reject" strategy.
    pub fn check<Q>(&self, key: &Q, cost: u64) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.check_at(key, self.clock.now(), cost)
    }

    /// [`check`](Self::check) at `now`.
    #[inline(always)]
    fn check_at<Q>(&self, key: &Q, now: Ticks, cost: u64) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.update(
            key,
            now,
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
        self.peek_at(key, self.clock.now(), cost)
    }

    /// [`peek`](Self::peek) at `now`.
    fn peek_at<Q>(&self, key: &Q, now: Ticks, cost: u64) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hasher.hash_one(key);
        let shard = read(self.shard(hash));
        let state = shard
            .table
            .find(hash, |e| e.key.borrow() == key)
            .and_then(|e| self.state(e, &shard.wide));
        self.algorithm.peek(state, now, cost)
    }

    /// Forgets `key`: its next request finds it fresh.
    pub fn reset<Q>(&self, key: &Q)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.remove_state(key);
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
                shard.retain(|e, wide| !self.is_fresh(e, wide, now));
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

    /// Requests on new keys refused because their shard was full of keys that would
    /// refuse a request ([`OnFull::DenyNew`]).
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// The most keys held at once: `max_keys` (at least one), split among the shards.
    pub const fn capacity(&self) -> usize {
        self.capacity
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

    /// Decides on `key`'s state at `now`: with `step` on its word where the algorithm is
    /// a bucket and the operands fit, else with `transition`. A key already held is
    /// decided under its shard's shared lock, inline (a caller that reads only `allowed`
    /// then pays for no division); the rest is out of line.
    #[inline(always)]
    fn update<Q>(
        &self,
        key: &Q,
        now: Ticks,
        step: impl Fn(&WordGcra, u64, Ticks) -> Option<(Verdict, u64)>,
        mut transition: impl FnMut(Option<A::State>, Ticks) -> (Decision, Option<A::State>),
    ) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let hash = self.hasher.hash_one(key);
        let lock = self.shard(hash);
        let found = {
            let shard = read(lock);
            shard
                .table
                .find(hash, |e| e.key.borrow() == key)
                .map(|entry| self.decide_on(entry, &shard.wide, now, &step, &mut transition))
        };
        match found.flatten() {
            Some((decision, false)) => decision,
            found => self.update_exclusive(
                key,
                hash,
                now,
                found.map(|(decision, _)| decision),
                &step,
                &mut transition,
            ),
        }
    }

    /// [`update`](Self::update) on the exact path (never a bucket's word arithmetic, which
    /// decides requests only), keeping what `transition` made with its decision: that,
    /// or the decision answered instead where a full shard refused a new key (then
    /// nothing was stored).
    fn update_exact<Q, R>(
        &self,
        key: &Q,
        now: Ticks,
        mut transition: impl FnMut(Option<A::State>, Ticks) -> (Option<R>, Decision, Option<A::State>),
    ) -> Result<R, Decision>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let mut made = None;
        let decision = self.update(
            key,
            now,
            |_, _, _| None,
            |state, now| {
                let (result, decision, state) = transition(state, now);
                made = result.map(|result| (result, decision));
                (decision, state)
            },
        );
        // A refused new key answers another decision than the transition's.
        match made {
            Some((result, made)) if made == decision => Ok(result),
            _ => Err(decision),
        }
    }

    /// [`update`](Self::update)'s cases under the shard's exclusive lock: `key` left fresh
    /// by `decided`, or not decided under the shared lock (a new key, or a state that
    /// outgrew its word).
    #[cold]
    #[inline(never)]
    fn update_exclusive<Q>(
        &self,
        key: &Q,
        hash: u64,
        now: Ticks,
        decided: Option<Decision>,
        step: &impl Fn(&WordGcra, u64, Ticks) -> Option<(Verdict, u64)>,
        transition: &mut impl FnMut(Option<A::State>, Ticks) -> (Decision, Option<A::State>),
    ) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let lock = self.shard(hash);
        // Left fresh: the key may go (rare: a decision that changes a state leaves it
        // fresh only at cost zero).
        if let Some(decision) = decided {
            let mut guard = write(lock);
            let shard = &mut *guard;
            if let Ok(entry) = shard.table.find_entry(hash, |e| e.key.borrow() == key) {
                if self.state(entry.get(), &shard.wide).is_none() {
                    let (removed, _) = entry.remove();
                    shard.wide.release(removed.word.into_inner());
                }
            }
            return decision;
        }
        let mut guard = write(lock);
        let shard = &mut *guard;
        match shard.table.entry(
            hash,
            |e| e.key.borrow() == key,
            |e| self.hasher.hash_one(&e.key),
        ) {
            // Another thread added the key meanwhile.
            TableEntry::Occupied(mut occupied) => {
                let (decision, fresh) =
                    self.decide_held(occupied.get_mut(), &mut shard.wide, now, step, transition);
                if fresh {
                    let (removed, _) = occupied.remove();
                    shard.wide.release(removed.word.into_inner());
                }
                decision
            }
            TableEntry::Vacant(_) => {
                // Decided as it will be stored (on a word, or behind a lock), and stored
                // only if that leaves it other than fresh.
                let word = match self.units {
                    Some(_) => 0,
                    None => shard.wide.add(None).0,
                };
                let mut entry = Entry {
                    key: key.to_owned(),
                    word: AtomicU64::new(word),
                };
                let (decision, fresh) =
                    self.decide_held(&mut entry, &mut shard.wide, now, step, transition);
                if fresh {
                    shard.wide.release(entry.word.into_inner());
                    return decision;
                }
                match self.make_room(shard, now) {
                    Ok(()) => {
                        shard
                            .table
                            .insert_unique(hash, entry, |e| self.hasher.hash_one(&e.key));
                        decision
                    }
                    Err(wait) => {
                        shard.wide.release(entry.word.into_inner());
                        self.refused.fetch_add(1, Ordering::Relaxed);
                        room::refusal(&decision, wait)
                    }
                }
            }
        }
    }

    /// Decides on `entry`'s state in place: on its word with `step` (one
    /// compare-and-swap), else under its wide state's lock with `transition`. Returns the
    /// decision and whether it left the state fresh; `None` where a bucket's state
    /// outgrows the word (see [`decide_held`](Self::decide_held)).
    #[inline(always)]
    fn decide_on(
        &self,
        entry: &Entry<K>,
        wide: &WideStates<A::State>,
        now: Ticks,
        step: &impl Fn(&WordGcra, u64, Ticks) -> Option<(Verdict, u64)>,
        transition: &mut impl FnMut(Option<A::State>, Ticks) -> (Decision, Option<A::State>),
    ) -> Option<(Decision, bool)> {
        let mut current = entry.word.load(Ordering::Acquire);
        if let Some(units) = &self.units {
            while current < WIDE_FROM {
                // The verdict and the exact path's decision are kept apart, never wrapped
                // in one value: copying such a value through the stack stalled the loads
                // that read it back (store forwarding), a tenth of a decision's time.
                let (decision, next) =
                    match step(units.gcra(), current, now).filter(|&(_, next)| next < WIDE_FROM) {
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
                            let next = units.pack(next).filter(|&next| next < WIDE_FROM)?;
                            match publish(&entry.word, current, next) {
                                Ok(()) => (decision, next),
                                Err(actual) => {
                                    current = actual;
                                    continue;
                                }
                            }
                        }
                    };
                return Some((decision, next == 0));
            }
        }
        Some(Self::decide_wide(wide.get(current)?, now, transition))
    }

    /// [`decide_on`](Self::decide_on) for a holder of the shard's exclusive lock, which
    /// moves a state that outgrew its word to a wide state.
    fn decide_held(
        &self,
        entry: &mut Entry<K>,
        wide: &mut WideStates<A::State>,
        now: Ticks,
        step: &impl Fn(&WordGcra, u64, Ticks) -> Option<(Verdict, u64)>,
        transition: &mut impl FnMut(Option<A::State>, Ticks) -> (Decision, Option<A::State>),
    ) -> (Decision, bool) {
        if let Some(done) = self.decide_on(entry, wide, now, step, transition) {
            return done;
        }
        let word = *entry.word.get_mut();
        let state = match &self.units {
            Some(units) if word < WIDE_FROM => units.unpack(word),
            _ => None,
        };
        let (named, slot) = wide.add(state);
        *entry.word.get_mut() = named;
        Self::decide_wide(slot, now, transition)
    }

    /// Decides on a wide state behind its lock, storing when it is fresh again before
    /// unlocking (so that instant is exact).
    fn decide_wide(
        wide: &WideState<A::State>,
        now: Ticks,
        transition: &mut impl FnMut(Option<A::State>, Ticks) -> (Decision, Option<A::State>),
    ) -> (Decision, bool) {
        let mut state = lock(&wide.state);
        let (decision, next) = transition(state.take(), now);
        let fresh = next.is_none();
        *state = next;
        wide.fresh_at
            .store(now.saturating_add(decision.reset_after), Ordering::Relaxed);
        (decision, fresh)
    }

    /// `entry`'s state.
    fn state(&self, entry: &Entry<K>, wide: &WideStates<A::State>) -> Option<A::State> {
        match (entry.word.load(Ordering::Acquire), &self.units) {
            (word, Some(units)) if word < WIDE_FROM => units.unpack(word),
            (word, _) => wide.get(word).and_then(|w| lock(&w.state).clone()),
        }
    }

    /// The instant `entry`'s state is fresh again: the order of eviction. A word says it
    /// itself; a wide state by the instant stored with it.
    fn fresh_at(&self, entry: &Entry<K>, wide: &WideStates<A::State>) -> Ticks {
        match (entry.word.load(Ordering::Acquire), &self.units) {
            (word, Some(units)) if word < WIDE_FROM => units.gcra().fresh_at(word),
            (word, _) => wide
                .get(word)
                .map_or(0, |w| w.fresh_at.load(Ordering::Relaxed)),
        }
    }

    /// Whether `entry`'s state is fresh at `now`, for a holder of its shard's exclusive
    /// lock (no decision in flight).
    fn is_fresh(&self, entry: &Entry<K>, wide: &WideStates<A::State>, now: Ticks) -> bool {
        self.fresh_at(entry, wide) <= now
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
        self.reserve_at(key, self.clock.now(), cost, max_wait)
    }

    /// [`reserve`](Self::reserve) at `now`.
    #[inline(always)]
    fn reserve_at<Q>(&self, key: &Q, now: Ticks, cost: u64, max_wait: Ticks) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.update(
            key,
            now,
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

/// The host contract on byte keys. A request with its own `now` is decided at that
/// time (refused beyond [`MAX_TICKS`](crate::MAX_TICKS)), one without at the clock's:
/// a key decided on both time lines is decided as if at the later of the two, or more
/// strictly, never on a negative interval.
impl<A: Reserve, C: Clock, H: BuildHasher> Limiter for KeyedLimiter<Vec<u8>, A, C, H> {
    /// Only a `now` beyond `MAX_TICKS` is an error.
    type Error = ParamError;

    fn check(&self, r: &Request<'_>) -> Result<Decision, ParamError> {
        Ok(self.check_at(r.key, self.time(r)?, r.cost))
    }

    fn peek(&self, r: &Request<'_>) -> Result<Decision, ParamError> {
        Ok(self.peek_at(r.key, self.time(r)?, r.cost))
    }

    fn reset(&self, key: &[u8]) -> Result<(), ParamError> {
        KeyedLimiter::reset(self, key);
        Ok(())
    }

    fn reserve(&self, r: &Request<'_>, max_wait: Ticks) -> Result<Decision, ParamError> {
        Ok(self.reserve_at(r.key, self.time(r)?, r.cost, max_wait))
    }
}

impl<K, A: Algorithm, C: Clock, H> KeyedLimiter<K, A, C, H> {
    /// The time to decide `request` at: its own, or the clock's.
    fn time(&self, request: &Request<'_>) -> Result<Ticks, ParamError> {
        time(request.now, &self.clock)
    }
}

/// The time a host request acts at: its own `now` (refused beyond
/// [`MAX_TICKS`](crate::MAX_TICKS)), or else `clock`'s.
pub(super) fn time(now: Option<Ticks>, clock: &impl Clock) -> Result<Ticks, ParamError> {
    now.map_or_else(|| Ok(clock.now()), check_now)
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
