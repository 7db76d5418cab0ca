//! In-process leases: a guard per lease that releases it on drop, and waiters woken when
//! a lease is freed or expires.

use core::borrow::Borrow;
use core::cell::Cell;
use core::fmt;
use core::hash::{BuildHasher, Hash};
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::borrow::ToOwned;
use std::boxed::Box;
use std::collections::hash_map::RandomState;
#[cfg(feature = "tokio")]
use std::sync::Arc;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};
use std::vec::Vec;

use hashbrown::hash_table::HashTable;
use portable_atomic::AtomicU128;

use super::cell::split_word;
use super::keyed::{layout, shard_index, MIN_SWEEP};
use crate::lease::{check_owner, check_ttl};
use crate::{
    Clock, Concurrency, Decision, Grant, Lease, LeaseError, LeaseState, MonotonicClock, Ticks,
    MAX_TICKS,
};

/// Why a lease was not granted.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AcquireError {
    /// Every lease is held (until the deadline, when waiting), or a keyed table is full
    /// of keys in use; `retry_after` is the time until the earliest one expires.
    #[error("every lease is held")]
    Busy(Decision),
    /// A parameter is out of range, or the owner's holds or the key's tokens ran out.
    #[error(transparent)]
    Lease(#[from] LeaseError),
}

/// One [`Concurrency`] limit for the whole process: at most `max` leases held at once,
/// each by the guards of one owner.
///
/// ```
/// use std::time::Duration;
/// use tollgate_core::memory::Leases;
/// use tollgate_core::{Concurrency, SECOND};
///
/// // At most 3 requests in flight; a holder that leaks its guard frees it after 30 s.
/// let in_flight = Leases::new(Concurrency::new(3)?);
/// let guard = in_flight.acquire(None, 30 * SECOND, Duration::from_millis(100))?;
/// // Pass the fencing token with every write to the protected resource.
/// let _token = guard.token();
/// drop(guard); // released
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// The table is lock-free for the host's own owners (`None`): a grant is a clock read
/// and two compare-and-swaps (the fencing token's counter and a free slot of `max`, each
/// one 128-bit word of token and expiry), a release one. Owners given by callers, whose
/// leases are re-entered, are listed beside the slots under the table's lock. The owner
/// of a guard acquired with `None` is `0xff` and its token.
pub struct Leases<C = MonotonicClock> {
    concurrency: Concurrency,
    clock: C,
    slots: Slots,
    /// The leases of owners given by callers, with their hold counts; waiters register
    /// under its lock.
    listed: Waitable<Vec<Listed>>,
}

/// A lease whose owner a caller gave, kept beside its slot.
#[derive(Debug)]
struct Listed {
    owner: Box<[u8]>,
    token: u64,
    slot: usize,
    holds: u64,
}

/// `read` from the clock, but never earlier than `latest`, the latest time a table (or a
/// shard of tables) already used, which it becomes: two threads read the clock in one
/// order and lock in the other, and a token derived from the earlier reading could
/// repeat one granted before a deletion.
fn advance(latest: &mut Ticks, read: Ticks) -> Ticks {
    *latest = (*latest).max(read);
    *latest
}

impl Leases {
    /// Leases on the process's [`MonotonicClock`].
    pub fn new(concurrency: Concurrency) -> Self {
        Self::with_clock(concurrency, MonotonicClock::new())
    }
}

impl<C: Clock + Sync> Leases<C> {
    /// Leases whose expiries are read on `clock` (a [`ManualClock`](crate::ManualClock)
    /// in tests).
    pub fn with_clock(concurrency: Concurrency, clock: C) -> Self {
        Self {
            slots: Slots::new(concurrency.max()),
            concurrency,
            clock,
            listed: Waitable::new(Vec::new()),
        }
    }

    /// A lease for `ttl` ticks now, or [`AcquireError::Busy`] if `max` are held.
    ///
    /// With `owner` `None` the guard gets an owner of its own; give an owner (1 to 128
    /// bytes) to make a lock reentrant: a guard of an owner already holding the lease
    /// re-enters it (same token), and the lease is freed when all its guards are gone.
    pub fn try_acquire(
        &self,
        owner: Option<&[u8]>,
        ttl: Ticks,
    ) -> Result<LeaseGuard<'_>, AcquireError> {
        self.acquire(owner, ttl, Duration::ZERO)
    }

    /// A lease for `ttl` ticks, waiting up to `timeout` for one to be released or to
    /// expire. Blocks the thread; waiters sleep until woken, not polling.
    pub fn acquire(
        &self,
        owner: Option<&[u8]>,
        ttl: Ticks,
        timeout: Duration,
    ) -> Result<LeaseGuard<'_>, AcquireError> {
        Self::check(owner, ttl)?;
        let first = self.attempt(None, self.clock.now(), owner, ttl);
        let (slot, grant) = match first {
            Err(AcquireError::Busy(_)) if !timeout.is_zero() => self.listed.wait(
                timeout,
                || self.clock.now(),
                |listed, now| self.attempt(Some(listed), now, owner, ttl),
            )?,
            other => other?,
        };
        Ok(Self::guard(self, owner, slot, grant))
    }

    /// [`acquire`](Self::acquire) as a future: the task sleeps until woken by a release
    /// or an expiry. Dropping the future gives up waiting and holds nothing.
    #[cfg(feature = "tokio")]
    pub async fn acquire_async(
        &self,
        owner: Option<&[u8]>,
        ttl: Ticks,
        timeout: Duration,
    ) -> Result<LeaseGuard<'_>, AcquireError> {
        Self::check(owner, ttl)?;
        let first = self.attempt(None, self.clock.now(), owner, ttl);
        let (slot, grant) = match first {
            Err(AcquireError::Busy(_)) if !timeout.is_zero() => {
                self.listed
                    .wait_async(
                        timeout,
                        || self.clock.now(),
                        |listed, now| self.attempt(Some(listed), now, owner, ttl),
                    )
                    .await?
            }
            other => other?,
        };
        Ok(Self::guard(self, owner, slot, grant))
    }

    fn check(owner: Option<&[u8]>, ttl: Ticks) -> Result<(), LeaseError> {
        if let Some(owner) = owner {
            check_owner(owner)?;
        }
        Ok(check_ttl(ttl)?)
    }

    fn guard<'a>(
        host: &'a Self,
        owner: Option<&[u8]>,
        slot: usize,
        grant: Grant,
    ) -> LeaseGuard<'a> {
        let owner = match owner {
            Some(given) => Owner::Given(given.into()),
            None => Owner::Made(made_owner(grant.token)),
        };
        LeaseGuard::new(host, (), owner, slot, grant)
    }

    /// One attempt at a lease for `owner` at `now`: lock-free for the host's own owners,
    /// under the table's lock (`listed`, taken here if not given) for a given one.
    fn attempt(
        &self,
        listed: Option<&mut Vec<Listed>>,
        now: Ticks,
        owner: Option<&[u8]>,
        ttl: Ticks,
    ) -> Result<(usize, Grant), AcquireError> {
        let now = now.min(MAX_TICKS);
        let expires_at = now + ttl;
        match (owner, listed) {
            (None, _) => self.slots.claim(now, expires_at, 0),
            (Some(owner), Some(listed)) => self.acquire_listed(listed, owner, now, expires_at),
            (Some(owner), None) => {
                self.acquire_listed(&mut self.listed.lock(), owner, now, expires_at)
            }
        }
    }

    /// A lease for an owner a caller gave: the one it holds re-entered, else a new one
    /// listed with its owner.
    fn acquire_listed(
        &self,
        listed: &mut Vec<Listed>,
        owner: &[u8],
        now: Ticks,
        expires_at: Ticks,
    ) -> Result<(usize, Grant), AcquireError> {
        let longer = |expiry: Ticks| expiry.max(expires_at);
        if let Some(i) = listed.iter().position(|l| *l.owner == *owner) {
            let entry = &mut listed[i];
            if self.slots.held(entry.slot, entry.token, now).is_some() {
                let holds = entry.holds.checked_add(1).ok_or(LeaseError::TooManyHolds)?;
                if let Some(expiry) = self.slots.extend(entry.slot, entry.token, now, longer, 0) {
                    entry.holds = holds;
                    return Ok((entry.slot, Grant::new(entry.token, expiry, holds)));
                }
            }
            // Expired: the owner gets a new lease.
            listed.swap_remove(i);
        }
        // A caller naming the lease of one of the host's owners re-enters it as well;
        // listed from now on, its releases count holds.
        if let Some(token) = made_token(owner) {
            let slot = self.slots.find(token, now);
            let extended = slot.and_then(|s| self.slots.extend(s, token, now, longer, LISTED));
            if let (Some(slot), Some(expiry)) = (slot, extended) {
                listed.push(Listed {
                    owner: owner.into(),
                    token,
                    slot,
                    holds: 2,
                });
                return Ok((slot, Grant::new(token, expiry, 2)));
            }
        }
        let (slot, grant) = self.slots.claim(now, expires_at, LISTED)?;
        // Leases claimed over since (expired) leave the list, so it holds at most one
        // entry per slot.
        listed.retain(|l| self.slots.held(l.slot, l.token, 0).is_some());
        listed.push(Listed {
            owner: owner.into(),
            token: grant.token,
            slot,
            holds: 1,
        });
        Ok((slot, grant))
    }

    /// Releases the lease listed with `token` once, under the table's lock.
    fn release_listed(&self, slot: usize, token: u64, live_at: Ticks) -> Released {
        let mut listed = self.listed.lock();
        let i = listed
            .iter()
            .position(|l| l.token == token)
            .ok_or(LeaseError::NotHeld)?;
        let held = self
            .slots
            .held(slot, token, live_at)
            .ok_or(LeaseError::NotHeld)?;
        let holds = listed[i].holds - 1;
        if holds > 0 {
            listed[i].holds = holds;
            return Ok(Grant::new(token, held.expires_at, holds));
        }
        listed.swap_remove(i);
        let expires_at = self.slots.free(slot, token, live_at)?;
        Ok(Grant::new(token, expires_at, 0))
    }

    /// The leases unexpired now, oldest grant first, and the last token granted.
    pub fn state(&self) -> LeaseState {
        let now = self.clock.now().min(MAX_TICKS);
        let listed = self.listed.lock();
        let mut leases: Vec<Lease> = (0..self.slots.words.len())
            .filter_map(|slot| {
                let (token, low) = self.slots.read(slot);
                let expires_at = low & !LISTED;
                (expires_at > now).then(|| {
                    let entry = listed.iter().find(|l| l.token == token && l.slot == slot);
                    match entry.filter(|_| low & LISTED != 0) {
                        Some(l) => Lease::new(l.owner.to_vec(), token, expires_at, l.holds),
                        None => Lease::new(made_owner(token).to_vec(), token, expires_at, 1),
                    }
                })
            })
            .collect();
        leases.sort_unstable_by_key(Lease::token);
        LeaseState::new(self.slots.last_token.load(Ordering::SeqCst), leases)
    }

    /// The limit.
    pub const fn concurrency(&self) -> &Concurrency {
        &self.concurrency
    }

    /// The clock expiries are read on.
    pub const fn clock(&self) -> &C {
        &self.clock
    }
}

impl<C: Clock + Sync> Host<()> for Leases<C> {
    fn release(&self, _: &(), held: &Held<'_>, read_clock: bool) -> Released {
        // A lease is held while unexpired; without a clock read, while in its slot at
        // all (removing an expired one is what expiry does).
        let live_at = if read_clock {
            self.clock.now().min(MAX_TICKS)
        } else {
            0
        };
        let released = match self.slots.held(held.slot, held.token, live_at) {
            Some(lease) if lease.listed => self.release_listed(held.slot, held.token, live_at),
            Some(_) => self
                .slots
                .free(held.slot, held.token, live_at)
                .map(|expires_at| Grant::new(held.token, expires_at, 0)),
            None => Err(LeaseError::NotHeld),
        };
        self.listed.woken_by(&released);
        released
    }

    fn renew(&self, _: &(), held: &Held<'_>, ttl: Ticks) -> Released {
        check_ttl(ttl)?;
        let now = self.clock.now().min(MAX_TICKS);
        let expires_at = now + ttl;
        let listed = self.listed.lock();
        let expiry = self
            .slots
            .extend(held.slot, held.token, now, |_| expires_at, 0)
            .ok_or(LeaseError::NotHeld)?;
        let holds = listed
            .iter()
            .find(|l| l.token == held.token)
            .map_or(1, |l| l.holds);
        Ok(Grant::new(held.token, expiry, holds))
    }
}

/// The leases of a [`Leases`] table, lock-free: `max` slots, each one 128-bit word
/// holding a lease's fencing token (high half) and expiry (low half), claimed, renewed
/// and freed by one compare-and-swap each. A slot is free once its expiry has passed;
/// freeing it sets the expiry to zero but keeps the token, so a claim that read the slot
/// before another thread claimed and freed it fails its compare-and-swap rather than
/// holding a token older than that thread's.
struct Slots {
    words: Box<[AtomicU128]>,
    /// The last fencing token granted; the next is `max(last + 1, now)`.
    last_token: AtomicU64,
}

/// Set in a slot's expiry while its owner, given by a caller, is listed beside the
/// slots (expiries stay below `2^63`: `MAX_TICKS` plus a year).
const LISTED: u64 = 1 << 63;

/// A lease found in its slot.
struct InSlot {
    word: u128,
    expires_at: Ticks,
    listed: bool,
}

impl Slots {
    fn new(max: u64) -> Self {
        let words = (0..max).map(|_| AtomicU128::new(0)).collect();
        Self {
            words,
            last_token: AtomicU64::new(0),
        }
    }

    /// A slot's token and expiry bits.
    fn read(&self, slot: usize) -> (u64, u64) {
        self.words
            .get(slot)
            .map_or((0, 0), |w| split_word(w.load(Ordering::SeqCst)))
    }

    /// The lease granted with `token` in `slot`, if it is there and unexpired at `now`.
    fn held(&self, slot: usize, token: u64, now: Ticks) -> Option<InSlot> {
        let word = self.words.get(slot)?.load(Ordering::SeqCst);
        let (found, low) = split_word(word);
        let expires_at = low & !LISTED;
        (found == token && expires_at > now).then_some(InSlot {
            word,
            expires_at,
            listed: low & LISTED != 0,
        })
    }

    /// The slot of the lease granted with `token`, if it is unexpired at `now` and not
    /// listed.
    fn find(&self, token: u64, now: Ticks) -> Option<usize> {
        (0..self.words.len()).find(|&slot| {
            self.held(slot, token, now)
                .is_some_and(|lease| !lease.listed)
        })
    }

    /// Claims a slot free at `now` for a new lease expiring at `expires_at` (with
    /// `flags`), or the denial when all are held: its `retry_after` is the time until
    /// the earliest expires.
    fn claim(
        &self,
        now: Ticks,
        expires_at: Ticks,
        flags: u64,
    ) -> Result<(usize, Grant), AcquireError> {
        let len = self.words.len();
        let start = first_slot() % len;
        let (mut earliest, mut latest) = (Ticks::MAX, 0);
        for slot in (start..len).chain(0..start) {
            let mut current = self.words[slot].load(Ordering::SeqCst);
            loop {
                let expiry = split_word(current).1 & !LISTED;
                if expiry > now {
                    earliest = earliest.min(expiry);
                    latest = latest.max(expiry);
                    break;
                }
                let token = self.next_token(now)?;
                let word = (u128::from(token) << 64) | u128::from(expires_at | flags);
                match self.words[slot].compare_exchange(
                    current,
                    word,
                    Ordering::SeqCst,
                    Ordering::SeqCst,
                ) {
                    Ok(_) => return Ok((slot, Grant::new(token, expires_at, 1))),
                    // Claimed, or freed again, by another thread meanwhile (the token
                    // taken is skipped, never reused).
                    Err(actual) => current = actual,
                }
            }
        }
        let last = self.last_token.load(Ordering::SeqCst);
        let fresh_at = latest.max(last.saturating_add(1));
        let max = len as u64;
        Err(AcquireError::Busy(Decision::deny(
            max,
            0,
            Some(earliest - now),
            fresh_at - now,
        )))
    }

    /// The next fencing token at `now`: `max(last + 1, now)`.
    fn next_token(&self, now: Ticks) -> Result<u64, LeaseError> {
        let mut last = self.last_token.load(Ordering::SeqCst);
        loop {
            let token = last
                .checked_add(1)
                .ok_or(LeaseError::TokensExhausted)?
                .max(now);
            match self.last_token.compare_exchange_weak(
                last,
                token,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => return Ok(token),
                Err(actual) => last = actual,
            }
        }
    }

    /// Moves the expiry of the lease granted with `token` in `slot`, unexpired at `now`,
    /// to `expiry(current)`, adding `flags`; the new expiry, `None` if not held.
    fn extend(
        &self,
        slot: usize,
        token: u64,
        now: Ticks,
        expiry: impl Fn(Ticks) -> Ticks,
        flags: u64,
    ) -> Option<Ticks> {
        loop {
            let lease = self.held(slot, token, now)?;
            let expires_at = expiry(lease.expires_at);
            let kept = if lease.listed { LISTED } else { 0 };
            let word = (u128::from(token) << 64) | u128::from(expires_at | kept | flags);
            if self.replace(slot, lease.word, word) {
                return Some(expires_at);
            }
        }
    }

    /// Frees the lease granted with `token` in `slot` if it is unexpired at `live_at`;
    /// its expiry.
    fn free(&self, slot: usize, token: u64, live_at: Ticks) -> Result<Ticks, LeaseError> {
        loop {
            let lease = self.held(slot, token, live_at).ok_or(LeaseError::NotHeld)?;
            if self.replace(slot, lease.word, u128::from(token) << 64) {
                return Ok(lease.expires_at);
            }
        }
    }

    fn replace(&self, slot: usize, current: u128, word: u128) -> bool {
        self.words.get(slot).is_some_and(|w| {
            w.compare_exchange(current, word, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        })
    }
}

/// Where this thread starts looking for a free slot: threads start four slots (a cache
/// line) apart, so that two of them rarely write the same line.
fn first_slot() -> usize {
    static THREADS: AtomicUsize = AtomicUsize::new(0);
    std::thread_local!(static FIRST: usize = THREADS.fetch_add(4, Ordering::Relaxed));
    FIRST.with(|first| *first)
}

/// The owner of a lease of the host's own: `0xff` (which no UTF-8 text starts with)
/// and its token, unique in its table.
fn made_owner(token: u64) -> [u8; 9] {
    let mut owner = [0xff; 9];
    owner[1..].copy_from_slice(&token.to_be_bytes());
    owner
}

/// The token a [`made_owner`] names.
fn made_token(owner: &[u8]) -> Option<u64> {
    match owner {
        [0xff, token @ ..] => Some(u64::from_be_bytes(token.try_into().ok()?)),
        _ => None,
    }
}

impl<C> fmt::Debug for Leases<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leases")
            .field("concurrency", &self.concurrency)
            .finish_non_exhaustive()
    }
}

/// A [`Concurrency`] limit per key (a lock per resource name, a cap on requests in
/// flight per user), holding at most `max_keys` keys.
///
/// Keys live in shards like a [`KeyedLimiter`](super::KeyedLimiter)'s. A key is dropped
/// once its state is fresh (nothing held and the clock past its last token, so a later
/// grant still gets a larger token), at once when a release leaves it fresh and by a
/// sweep whenever a shard has doubled. A key in use is never evicted: a shard full of
/// keys in use answers a new key with [`AcquireError::Busy`] until one is fresh.
pub struct KeyedLeases<K, C = MonotonicClock, H = RandomState> {
    concurrency: Concurrency,
    clock: C,
    hasher: H,
    shards: Vec<Waitable<Shard<K>>>,
    /// `log2(shards.len())`.
    shard_bits: u32,
}

#[derive(Debug)]
struct Shard<K> {
    table: HashTable<Entry<K>>,
    /// The latest time a transition in this shard used (see [`advance`]).
    now: Ticks,
    capacity: usize,
    /// Sweep fresh keys when the table reaches this length.
    sweep_at: usize,
}

#[derive(Debug)]
struct Entry<K> {
    hash: u64,
    key: K,
    state: LeaseState,
}

impl<K> Shard<K> {
    /// Makes room for one more key if keys that are fresh can go; otherwise the time
    /// until the earliest key is fresh.
    fn make_room(&mut self, now: Ticks) -> Result<(), Ticks> {
        if self.table.len() < self.sweep_at {
            return Ok(());
        }
        self.table.retain(|e| !e.state.is_fresh(now));
        self.sweep_at = (2 * self.table.len()).max(MIN_SWEEP).min(self.capacity);
        if self.table.len() < self.capacity {
            return Ok(());
        }
        let earliest = self.table.iter().map(|e| e.state.fresh_at()).min();
        Err(earliest.map_or(1, |t| t.saturating_sub(now)))
    }
}

impl<K: Hash + Eq + Send> KeyedLeases<K> {
    /// Leases per key, at most `max_keys` keys (at least one), on the process's
    /// [`MonotonicClock`].
    pub fn new(concurrency: Concurrency, max_keys: usize) -> Self {
        Self::with_clock(concurrency, max_keys, MonotonicClock::new())
    }
}

impl<K: Hash + Eq + Send, C: Clock + Sync> KeyedLeases<K, C> {
    /// Leases per key whose expiries are read on `clock`.
    pub fn with_clock(concurrency: Concurrency, max_keys: usize, clock: C) -> Self {
        Self::with_hasher(concurrency, max_keys, clock, RandomState::new())
    }
}

impl<K: Hash + Eq + Send, C: Clock + Sync, H: BuildHasher + Sync> KeyedLeases<K, C, H> {
    /// Leases per key, hashing keys with `hasher`.
    pub fn with_hasher(concurrency: Concurrency, max_keys: usize, clock: C, hasher: H) -> Self {
        let (shard_bits, capacities) = layout(max_keys);
        let shards = capacities
            .map(|capacity| {
                Waitable::new(Shard {
                    table: HashTable::new(),
                    now: 0,
                    capacity,
                    sweep_at: MIN_SWEEP.min(capacity),
                })
            })
            .collect();
        Self {
            concurrency,
            clock,
            hasher,
            shards,
            shard_bits,
        }
    }

    /// A lease on `key` for `ttl` ticks now; see [`Leases::try_acquire`].
    pub fn try_acquire<Q>(
        &self,
        key: &Q,
        owner: Option<&[u8]>,
        ttl: Ticks,
    ) -> Result<LeaseGuard<'_, K>, AcquireError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.acquire(key, owner, ttl, Duration::ZERO)
    }

    /// A lease on `key` for `ttl` ticks, waiting up to `timeout`; see
    /// [`Leases::acquire`].
    pub fn acquire<Q>(
        &self,
        key: &Q,
        owner: Option<&[u8]>,
        ttl: Ticks,
        timeout: Duration,
    ) -> Result<LeaseGuard<'_, K>, AcquireError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let owner = Owner::new(owner)?;
        let hash = self.hasher.hash_one(key);
        let shard = self.shard(hash);
        let attempt =
            |shard: &mut Shard<K>, read| self.attempt(shard, read, hash, key, &owner, ttl);
        // The clock is read before locking, to keep the lock short.
        let read = self.clock.now();
        let first = attempt(&mut shard.lock(), read);
        let grant = match first {
            Err(AcquireError::Busy(_)) if !timeout.is_zero() => {
                shard.wait(timeout, || self.clock.now(), attempt)?
            }
            other => other?,
        };
        Ok(LeaseGuard::new(self, key.to_owned(), owner, 0, grant))
    }

    /// [`acquire`](Self::acquire) as a future; see [`Leases::acquire_async`].
    #[cfg(feature = "tokio")]
    pub async fn acquire_async<Q>(
        &self,
        key: &Q,
        owner: Option<&[u8]>,
        ttl: Ticks,
        timeout: Duration,
    ) -> Result<LeaseGuard<'_, K>, AcquireError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized + Sync,
    {
        let (owner, grant) = self.grant_async(key, owner, ttl, timeout).await?;
        Ok(LeaseGuard::new(self, key.to_owned(), owner, 0, grant))
    }

    /// [`acquire_async`](Self::acquire_async) on a shared table: the guard holds a clone
    /// of the `Arc`, not a borrow, so it may outlive every other handle (a response body
    /// in a server) and the table lives as long as its last guard.
    #[cfg(feature = "tokio")]
    pub async fn acquire_owned_async<Q>(
        self: &Arc<Self>,
        key: &Q,
        owner: Option<&[u8]>,
        ttl: Ticks,
        timeout: Duration,
    ) -> Result<LeaseGuard<'static, K>, AcquireError>
    where
        Self: Send + 'static,
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized + Sync,
    {
        let (owner, grant) = self.grant_async(key, owner, ttl, timeout).await?;
        let host = HostRef::Shared(Arc::clone(self) as Arc<dyn Host<K> + Send>);
        Ok(LeaseGuard::with_host(host, key.to_owned(), owner, 0, grant))
    }

    #[cfg(feature = "tokio")]
    async fn grant_async<Q>(
        &self,
        key: &Q,
        owner: Option<&[u8]>,
        ttl: Ticks,
        timeout: Duration,
    ) -> Result<(Owner, Grant), AcquireError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized + Sync,
    {
        let owner = Owner::new(owner)?;
        let hash = self.hasher.hash_one(key);
        let grant = self
            .shard(hash)
            .wait_async(
                timeout,
                || self.clock.now(),
                |shard, read| self.attempt(shard, read, hash, key, &owner, ttl),
            )
            .await?;
        Ok((owner, grant))
    }

    fn attempt<Q>(
        &self,
        shard: &mut Shard<K>,
        read: Ticks,
        hash: u64,
        key: &Q,
        owner: &Owner,
        ttl: Ticks,
    ) -> Result<Grant, AcquireError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let now = advance(&mut shard.now, read);
        if let Some(entry) = shard.table.find_mut(hash, |e| e.key.borrow() == key) {
            return grant(&self.concurrency, &mut entry.state, now, owner.bytes(), ttl);
        }
        let mut state = LeaseState::default();
        let granted = grant(&self.concurrency, &mut state, now, owner.bytes(), ttl)?;
        if let Err(retry) = shard.make_room(now) {
            let max = self.concurrency.max();
            return Err(AcquireError::Busy(Decision::deny(max, 0, Some(retry), 0)));
        }
        let entry = Entry {
            hash,
            key: key.to_owned(),
            state,
        };
        shard.table.insert_unique(hash, entry, |e| e.hash);
        Ok(granted)
    }

    /// `key`'s lease table now, `None` if it is fresh.
    pub fn state<Q>(&self, key: &Q) -> Option<LeaseState>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hasher.hash_one(key);
        let shard = self.shard(hash).lock();
        let entry = shard.table.find(hash, |e| e.key.borrow() == key)?;
        Some(entry.state.clone())
    }

    /// The number of keys held.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().table.len()).sum()
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops every key whose state is fresh now, returning how many were dropped.
    pub fn sweep(&self) -> usize {
        let read = self.clock.now();
        self.shards
            .iter()
            .map(|s| {
                let mut shard = s.lock();
                let now = advance(&mut shard.now, read);
                let before = shard.table.len();
                shard.table.retain(|e| !e.state.is_fresh(now));
                before - shard.table.len()
            })
            .sum()
    }

    /// The limit each key has.
    pub const fn concurrency(&self) -> &Concurrency {
        &self.concurrency
    }

    /// The clock expiries are read on.
    pub const fn clock(&self) -> &C {
        &self.clock
    }

    fn shard(&self, hash: u64) -> &Waitable<Shard<K>> {
        &self.shards[shard_index(hash, self.shard_bits)]
    }

    /// Applies `op` to `key`'s state (if it has one) at the shard's time, after reading
    /// the clock if `read_clock`; drops the key if that leaves it fresh.
    fn with_state(
        &self,
        key: &K,
        read_clock: bool,
        op: impl FnOnce(&mut LeaseState, Ticks) -> Released,
    ) -> Released {
        let read = if read_clock { self.clock.now() } else { 0 };
        let hash = self.hasher.hash_one(key);
        let waitable = self.shard(hash);
        let mut shard = waitable.lock();
        let now = advance(&mut shard.now, read);
        let Ok(mut entry) = shard.table.find_entry(hash, |e| e.key == *key) else {
            return Err(LeaseError::NotHeld);
        };
        let done = op(&mut entry.get_mut().state, now);
        if entry.get().state.is_fresh(now) {
            entry.remove();
        }
        drop(shard);
        waitable.woken_by(&done);
        done
    }
}

impl<K, C, H> Host<K> for KeyedLeases<K, C, H>
where
    K: Hash + Eq + Send,
    C: Clock + Sync,
    H: BuildHasher + Sync,
{
    fn release(&self, key: &K, held: &Held<'_>, read_clock: bool) -> Released {
        self.with_state(key, read_clock, |state, now| {
            give_back(&self.concurrency, state, now, held.owner, held.token)
        })
    }

    fn renew(&self, key: &K, held: &Held<'_>, ttl: Ticks) -> Released {
        self.with_state(key, true, |state, now| {
            extend(&self.concurrency, state, now, held.owner, held.token, ttl)
        })
    }
}

impl<K, C, H> fmt::Debug for KeyedLeases<K, C, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedLeases")
            .field("concurrency", &self.concurrency)
            .field("shards", &self.shards.len())
            .finish_non_exhaustive()
    }
}

/// A lease held: released when dropped (or by [`release`](Self::release)).
///
/// Forgetting a guard (`std::mem::forget`) is the in-process crash: the lease is freed
/// when it expires, `ttl` after its last grant or renewal, and not before.
#[must_use = "dropping the guard releases the lease at once"]
pub struct LeaseGuard<'a, K = ()> {
    host: HostRef<'a, K>,
    key: K,
    owner: Owner,
    /// Where a [`Leases`] table holds the lease (0 for a keyed one).
    slot: usize,
    grant: Grant,
    held: bool,
}

/// The table a guard gives its lease back to: borrowed, or shared (an owned guard).
enum HostRef<'a, K> {
    Borrowed(&'a dyn Host<K>),
    /// Only `acquire_owned_async` (tokio) makes one.
    #[cfg(feature = "tokio")]
    Shared(Arc<dyn Host<K> + Send + 'a>),
}

impl<'a, K> HostRef<'a, K> {
    fn get(&self) -> &(dyn Host<K> + 'a) {
        match self {
            Self::Borrowed(host) => *host,
            #[cfg(feature = "tokio")]
            Self::Shared(host) => &**host,
        }
    }
}

impl<'a, K> LeaseGuard<'a, K> {
    fn new(host: &'a dyn Host<K>, key: K, owner: Owner, slot: usize, grant: Grant) -> Self {
        Self::with_host(HostRef::Borrowed(host), key, owner, slot, grant)
    }

    fn with_host(host: HostRef<'a, K>, key: K, owner: Owner, slot: usize, grant: Grant) -> Self {
        Self {
            host,
            key,
            owner,
            slot,
            grant,
            held: true,
        }
    }

    /// What identifies the lease to its host.
    fn held(&self) -> Held<'_> {
        Held {
            owner: self.owner.bytes(),
            token: self.grant.token,
            slot: self.slot,
        }
    }

    /// The fencing token: pass it with every write to the protected resource, which
    /// refuses a token below the highest it has seen (see
    /// [`FencedResource`](super::FencedResource)).
    pub const fn token(&self) -> u64 {
        self.grant.token
    }

    /// The instant (on the host's clock) the lease expires unless renewed; past it the
    /// holder must stop acting on it.
    pub const fn expires_at(&self) -> Ticks {
        self.grant.expires_at
    }

    /// The lease as of its grant or last renewal (`holds` counts its owner's guards).
    pub const fn grant(&self) -> Grant {
        self.grant
    }

    /// The owner holding it.
    pub fn owner(&self) -> &[u8] {
        self.owner.bytes()
    }

    /// The key it is held on (`()` for [`Leases`]).
    pub const fn key(&self) -> &K {
        &self.key
    }

    /// Extends the lease to `ttl` ticks from now ([`expires_at`](Self::expires_at) then
    /// says until when); its token stays. [`LeaseError::NotHeld`] if it has expired
    /// (another holder may have it: stop).
    pub fn renew(&mut self, ttl: Ticks) -> Result<(), LeaseError> {
        self.grant = self.host.get().renew(&self.key, &self.held(), ttl)?;
        Ok(())
    }

    /// Releases the lease now and returns how many guards of its owner still hold it (0:
    /// freed). [`LeaseError::NotHeld`] if it had expired, so writes made since may have
    /// been refused.
    pub fn release(mut self) -> Result<u64, LeaseError> {
        self.held = false;
        self.host
            .get()
            .release(&self.key, &self.held(), true)
            .map(|grant| grant.holds)
    }
}

impl<K> Drop for LeaseGuard<'_, K> {
    fn drop(&mut self) {
        if self.held {
            // No clock read: a lease still in the table is this guard's (its owner and
            // token match), expired or not, and removing it is what expiry would do.
            let _ = self.host.get().release(&self.key, &self.held(), false);
        }
    }
}

impl<K: fmt::Debug> fmt::Debug for LeaseGuard<'_, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseGuard")
            .field("key", &self.key)
            .field("owner", &crate::KeyDisplay(self.owner.bytes()))
            .field("grant", &self.grant)
            .finish()
    }
}

/// What a guard's host does for it.
trait Host<K>: Sync {
    /// Releases the guard's lease on `key` if it is still the one granted to it; at the
    /// table's latest time unless `read_clock`.
    fn release(&self, key: &K, held: &Held<'_>, read_clock: bool) -> Released;
    /// Renews the guard's lease on `key` if it is still the one granted to it.
    fn renew(&self, key: &K, held: &Held<'_>, ttl: Ticks) -> Released;
}

/// A guard's lease as its host finds it: the owner, the token granted, and the slot of
/// a [`Leases`] table.
struct Held<'g> {
    owner: &'g [u8],
    token: u64,
    slot: usize,
}

type Released = Result<Grant, LeaseError>;

/// A guard's owner: a number made for it (no allocation), or one the caller gave.
enum Owner {
    /// `0xff` (which no UTF-8 text starts with) and a 64-bit number unique in its table
    /// (see [`made_owner`]).
    Made([u8; 9]),
    Given(Box<[u8]>),
}

impl Owner {
    /// The owner given, checked, or a new one unique in the process.
    fn new(given: Option<&[u8]>) -> Result<Self, LeaseError> {
        Ok(match given {
            Some(given) => {
                check_owner(given)?;
                Self::Given(given.into())
            }
            None => Self::Made(made_owner(next_owner_id())),
        })
    }

    fn bytes(&self) -> &[u8] {
        match self {
            Self::Made(bytes) => bytes,
            Self::Given(bytes) => bytes,
        }
    }
}

/// A number unique in the process. Each thread takes numbers from a block of 2^32 of
/// its own, so threads do not contend on one counter.
fn next_owner_id() -> u64 {
    const BLOCK: u64 = 1 << 32;
    static BLOCKS: AtomicU64 = AtomicU64::new(1);
    std::thread_local!(static NEXT: Cell<u64> = const { Cell::new(0) });
    NEXT.with(|next| {
        let mut id = next.get();
        if id % BLOCK == 0 {
            id = BLOCKS.fetch_add(1, Ordering::Relaxed) * BLOCK;
        }
        next.set(id + 1);
        id
    })
}

/// Grants `owner` a lease on `state` at `now`, or says when to retry.
fn grant(
    concurrency: &Concurrency,
    state: &mut LeaseState,
    now: Ticks,
    owner: &[u8],
    ttl: Ticks,
) -> Result<Grant, AcquireError> {
    let acquired = concurrency.acquire_in(state, now, owner, ttl)?;
    acquired.grant.ok_or(AcquireError::Busy(acquired.decision))
}

/// Whether `owner` holds on `state` the lease granted with `token` (not a later one of
/// the same owner, granted after that one expired).
fn holds_token(state: &LeaseState, now: Ticks, owner: &[u8], token: u64) -> Result<(), LeaseError> {
    match state.held(owner, now).map(Lease::token) {
        Some(held) if held == token => Ok(()),
        _ => Err(LeaseError::NotHeld),
    }
}

fn give_back(
    concurrency: &Concurrency,
    state: &mut LeaseState,
    now: Ticks,
    owner: &[u8],
    token: u64,
) -> Released {
    holds_token(state, now, owner, token)?;
    concurrency.release_in(state, now, owner)
}

fn extend(
    concurrency: &Concurrency,
    state: &mut LeaseState,
    now: Ticks,
    owner: &[u8],
    token: u64,
    ttl: Ticks,
) -> Released {
    holds_token(state, now, owner, token)?;
    concurrency.renew_in(state, now, owner, ttl)
}

/// A value behind a mutex, with threads and tasks waiting for a lease in it to be freed.
struct Waitable<T> {
    value: Mutex<T>,
    /// Waiters registered under the lock; a release wakes them only if there are any
    /// (waking costs a system call even with nobody to wake).
    waiting: AtomicUsize,
    freed: Condvar,
    #[cfg(feature = "tokio")]
    notify: tokio::sync::Notify,
}

impl<T> Waitable<T> {
    fn new(value: T) -> Self {
        Self {
            value: Mutex::new(value),
            waiting: AtomicUsize::new(0),
            freed: Condvar::new(),
            #[cfg(feature = "tokio")]
            notify: tokio::sync::Notify::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, T> {
        // Transitions do not panic, but a poisoned lock must not turn every later call
        // into a panic either.
        self.value.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Wakes every waiter if `released` freed a lease; called with the lock released.
    fn woken_by(&self, released: &Released) {
        let freed = matches!(released, Ok(grant) if grant.holds == 0);
        if freed && self.waiting.load(Ordering::SeqCst) > 0 {
            // A waiter registers under the lock and keeps it until it sleeps (a lease
            // freed lock-free is freed without it): taking the lock waits for that.
            drop(self.lock());
            self.freed.notify_all();
            #[cfg(feature = "tokio")]
            self.notify.notify_waiters();
        }
    }

    /// After a first attempt was denied, runs `attempt` (on the value and a clock
    /// reading) until it grants, fails other than busy, or `timeout` passes; between
    /// attempts the thread sleeps until a lease is freed or the earliest one expires.
    fn wait<R>(
        &self,
        timeout: Duration,
        read: impl Fn() -> Ticks,
        mut attempt: impl FnMut(&mut T, Ticks) -> Result<R, AcquireError>,
    ) -> Result<R, AcquireError> {
        let mut deadline = Deadline::new(timeout);
        let mut value = self.lock();
        loop {
            // Registered before the attempt: a release after it sees the waiter.
            let waiting = Waiting::new(&self.waiting);
            let denied = match attempt(&mut value, read()) {
                Err(AcquireError::Busy(denied)) => denied,
                done => return done,
            };
            let Some(pause) = deadline.pause(&denied) else {
                return Err(AcquireError::Busy(denied));
            };
            value = self
                .freed
                .wait_timeout(value, pause)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
            drop(waiting);
        }
    }

    /// [`wait`](Self::wait) as a future.
    #[cfg(feature = "tokio")]
    async fn wait_async<R>(
        &self,
        timeout: Duration,
        read: impl Fn() -> Ticks,
        mut attempt: impl FnMut(&mut T, Ticks) -> Result<R, AcquireError>,
    ) -> Result<R, AcquireError> {
        let mut deadline = Deadline::new(timeout);
        loop {
            // Registered before the attempt, so a release right after it is not missed.
            let mut notified = core::pin::pin!(self.notify.notified());
            notified.as_mut().enable();
            let _waiting = Waiting::new(&self.waiting);
            let now = read();
            let denied = match attempt(&mut self.lock(), now) {
                Err(AcquireError::Busy(denied)) => denied,
                done => return done,
            };
            let Some(pause) = deadline.pause(&denied) else {
                return Err(AcquireError::Busy(denied));
            };
            let _ = tokio::time::timeout(pause, notified).await;
        }
    }
}

/// The end of a wait, fixed at the first denial: an attempt that succeeds at once (and
/// every `try_acquire`) reads no second clock.
struct Deadline {
    timeout: Duration,
    /// `Some(None)` once started with no representable end: wait forever.
    at: Option<Option<Instant>>,
}

impl Deadline {
    const fn new(timeout: Duration) -> Self {
        Self { timeout, at: None }
    }

    /// How long to sleep after `denied`: until the earliest lease expires or the
    /// deadline, `None` once the deadline has passed.
    fn pause(&mut self, denied: &Decision) -> Option<Duration> {
        if self.timeout.is_zero() {
            return None;
        }
        let now = Instant::now();
        let left = match *self.at.get_or_insert_with(|| now.checked_add(self.timeout)) {
            Some(at) => at
                .checked_duration_since(now)
                .filter(|left| !left.is_zero())?,
            None => Duration::MAX,
        };
        let expiry = denied
            .retry_after
            .map_or(Duration::MAX, Duration::from_micros);
        Some(left.min(expiry))
    }
}

/// One waiter registered in a [`Waitable`], from under its lock until dropped.
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    fn new(count: &'a AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::SeqCst);
        Self(count)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}
