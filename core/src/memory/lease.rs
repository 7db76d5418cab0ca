//! In-process leases: a guard per lease that releases it on drop, and waiters woken when
//! a lease is freed or expires.

use core::borrow::Borrow;
use core::cell::Cell;
use core::fmt;
use core::hash::{BuildHasher, Hash};
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::borrow::ToOwned;
use std::boxed::Box;
#[cfg(feature = "tokio")]
use std::sync::Arc;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};
use std::vec::Vec;

use hashbrown::hash_table::HashTable;

use super::keyed::{layout, shard_index};
use super::KeyHasher;
use crate::lease::{check_owner, check_ttl};
use crate::{
    Clock, Concurrency, Decision, Grant, Lease, LeaseError, LeaseState, MonotonicClock, Ticks,
    MAX_TICKS,
};

/// Shards never sweep below this many keys: small tables are cheap to keep.
const MIN_SWEEP: usize = 64;

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
/// The table is lock-free for the host's own owners (`None`) while a slot is free: a
/// grant is a clock read, a compare-and-swap reserving one of `max` slots and one atomic
/// add for the fencing token, a release one compare-and-swap; all on
/// 64-bit words. Owners given by callers, whose leases are re-entered, are listed beside
/// the slots under the table's lock, as are expired leases reclaimed. The owner of a
/// guard acquired with `None` is `0xff` and its token.
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
    #[inline]
    pub fn try_acquire(
        &self,
        owner: Option<&[u8]>,
        ttl: Ticks,
    ) -> Result<LeaseGuard<'_>, AcquireError> {
        Self::check(owner, ttl)?;
        let (slot, grant) = self.attempt(None, self.clock.now(), owner, ttl)?;
        Ok(Self::guard(self, owner, slot, grant))
    }

    /// A lease for `ttl` ticks, waiting up to `timeout` for one to be released or to
    /// expire. Blocks the thread; waiters sleep until woken, not polling.
    pub fn acquire(
        &self,
        owner: Option<&[u8]>,
        ttl: Ticks,
        timeout: Duration,
    ) -> Result<LeaseGuard<'_>, AcquireError> {
        match self.try_acquire(owner, ttl) {
            Err(AcquireError::Busy(_)) if !timeout.is_zero() => {
                let (slot, grant) = self.listed.wait(
                    timeout,
                    || self.clock.now(),
                    |listed, now| self.attempt(Some(listed), now, owner, ttl),
                )?;
                Ok(Self::guard(self, owner, slot, grant))
            }
            first => first,
        }
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
        match self.try_acquire(owner, ttl) {
            Err(AcquireError::Busy(_)) if !timeout.is_zero() => {
                let (slot, grant) = self
                    .listed
                    .wait_async(
                        timeout,
                        || self.clock.now(),
                        |listed, now| self.attempt(Some(listed), now, owner, ttl),
                    )
                    .await?;
                Ok(Self::guard(self, owner, slot, grant))
            }
            first => first,
        }
    }

    #[inline]
    fn check(owner: Option<&[u8]>, ttl: Ticks) -> Result<(), LeaseError> {
        if let Some(owner) = owner {
            check_owner(owner)?;
        }
        Ok(check_ttl(ttl)?)
    }

    #[inline]
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

    /// One attempt at a lease for `owner` at `now`: a free slot claimed lock-free for the
    /// host's own owners, else under the table's lock (`listed`, taken here if not
    /// given), where expired leases are reclaimed and given owners listed.
    #[inline]
    fn attempt(
        &self,
        listed: Option<&mut Vec<Listed>>,
        now: Ticks,
        owner: Option<&[u8]>,
        ttl: Ticks,
    ) -> Result<(usize, Grant), AcquireError> {
        let now = now.min(MAX_TICKS);
        let expires_at = now + ttl;
        if owner.is_none() {
            if let Some(granted) = self.slots.claim_free(now, expires_at)? {
                return Ok(granted);
            }
        }
        match listed {
            Some(listed) => self.attempt_locked(listed, now, owner, expires_at),
            None => self.attempt_locked(&mut self.listed.lock(), now, owner, expires_at),
        }
    }

    /// [`attempt`](Self::attempt) under the table's lock: a given owner's lease
    /// re-entered, else a slot free or expired claimed.
    fn attempt_locked(
        &self,
        listed: &mut Vec<Listed>,
        now: Ticks,
        owner: Option<&[u8]>,
        expires_at: Ticks,
    ) -> Result<(usize, Grant), AcquireError> {
        let Some(owner) = owner else {
            return self.slots.claim(listed, now, expires_at, None);
        };
        if let Some(granted) = self.re_enter(listed, owner, now, expires_at)? {
            return Ok(granted);
        }
        let (slot, grant) = self.slots.claim(listed, now, expires_at, Some(LISTED))?;
        listed.push(Listed {
            owner: owner.into(),
            token: grant.token,
            slot,
            holds: 1,
        });
        Ok((slot, grant))
    }

    /// The lease `owner` (given by a caller) holds at `now`, re-entered: one hold more,
    /// its expiry pushed to `expires_at` if that is later.
    fn re_enter(
        &self,
        listed: &mut Vec<Listed>,
        owner: &[u8],
        now: Ticks,
        expires_at: Ticks,
    ) -> Result<Option<(usize, Grant)>, LeaseError> {
        if let Some(i) = listed.iter().position(|l| *l.owner == *owner) {
            let entry = &mut listed[i];
            if let Some(expiry) = self.slots.live(entry.slot, LISTED, now) {
                entry.holds = entry.holds.checked_add(1).ok_or(LeaseError::TooManyHolds)?;
                let expiry = self.slots.set_expiry(entry.slot, expiry.max(expires_at));
                return Ok(Some((
                    entry.slot,
                    Grant::new(entry.token, expiry, entry.holds),
                )));
            }
            // Expired: its slot is free, and the owner gets a new lease.
            self.slots.set_free(listed.swap_remove(i).slot);
        }
        // A caller naming the lease of one of the host's owners re-enters it as well;
        // listed from now on (its guard's release then finds it listed), so releases
        // count holds.
        let Some(token) = made_token(owner) else {
            return Ok(None);
        };
        let Some((slot, expiry)) = self.slots.list(token, now) else {
            return Ok(None);
        };
        let expiry = self.slots.set_expiry(slot, expiry.max(expires_at));
        listed.push(Listed {
            owner: owner.into(),
            token,
            slot,
            holds: 2,
        });
        Ok(Some((slot, Grant::new(token, expiry, 2))))
    }

    /// Releases the listed lease granted with `token` once, under the table's lock.
    fn release_listed(&self, token: u64, live_at: Ticks) -> Released {
        let mut listed = self.listed.lock();
        let i = listed
            .iter()
            .position(|l| l.token == token)
            .ok_or(LeaseError::NotHeld)?;
        let slot = listed[i].slot;
        let expires_at = self
            .slots
            .live(slot, LISTED, live_at)
            .ok_or(LeaseError::NotHeld)?;
        let holds = listed[i].holds - 1;
        if holds > 0 {
            listed[i].holds = holds;
        } else {
            listed.swap_remove(i);
            self.slots.set_free(slot);
        }
        Ok(Grant::new(token, expires_at, holds))
    }

    /// The leases unexpired now, oldest grant first, and the last token granted.
    pub fn state(&self) -> LeaseState {
        let now = self.clock.now().min(MAX_TICKS);
        let listed = self.listed.lock();
        let mut leases: Vec<Lease> = (0..self.slots.slots.len())
            .filter_map(|slot| {
                let (holder, expires_at) = self.slots.settled(slot);
                if holder == FREE || expires_at <= now {
                    return None;
                }
                if holder != LISTED {
                    return Some(Lease::new(
                        made_owner(holder).to_vec(),
                        holder,
                        expires_at,
                        1,
                    ));
                }
                let entry = listed.iter().find(|l| l.slot == slot)?;
                Some(Lease::new(
                    entry.owner.to_vec(),
                    entry.token,
                    expires_at,
                    entry.holds,
                ))
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
        // The host's own owner's lease, if its slot still names its token; else listed
        // (given owners, and a host's owner a caller named since) or gone.
        let released = match self.slots.free(held.slot, held.token, live_at) {
            Some(expires_at) => Ok(Grant::new(held.token, expires_at, 0)),
            None => self.release_listed(held.token, live_at),
        };
        self.listed.woken_by(&released);
        released
    }

    fn renew(&self, _: &(), held: &Held<'_>, ttl: Ticks) -> Released {
        check_ttl(ttl)?;
        let now = self.clock.now().min(MAX_TICKS);
        let listed = self.listed.lock();
        if self.slots.live(held.slot, held.token, now).is_some() {
            let expiry = self.slots.set_expiry(held.slot, now + ttl);
            return Ok(Grant::new(held.token, expiry, 1));
        }
        let entry = listed
            .iter()
            .find(|l| l.token == held.token)
            .ok_or(LeaseError::NotHeld)?;
        self.slots
            .live(entry.slot, LISTED, now)
            .ok_or(LeaseError::NotHeld)?;
        let expiry = self.slots.set_expiry(entry.slot, now + ttl);
        Ok(Grant::new(held.token, expiry, entry.holds))
    }
}

/// The leases of a [`Leases`] table: `max` slots, each two 64-bit words, its holder and
/// its lease's expiry.
///
/// The holder is [`FREE`], [`RESERVED`] while a grant fills the slot, [`LISTED`] for a
/// lease of an owner given by a caller (listed beside the slots under the table's lock),
/// else the fencing token of a lease of the host's own owner. Tokens never repeat, so a
/// compare-and-swap on the holder cannot mistake a later lease for an earlier one. A
/// grant reserves a free slot (one compare-and-swap), takes its token and then writes the
/// expiry and the holder: the token is taken while the slot is its own, so a later
/// holder of the slot, which can only reserve it after that, takes a larger token. A
/// release of the host's own owner's lease is one compare-and-swap of its token to
/// [`FREE`]. Only a lease's holder writes its expiry; readers see a [`RESERVED`] slot
/// out (a few instructions) before reading it. Expired leases are reclaimed, given
/// owners listed and leases renewed under the table's lock, so none of those races
/// another; only grants of free slots and releases go without it.
struct Slots {
    slots: Box<[Slot]>,
    /// The last fencing token granted; the next is `max(last + 1, now)`.
    last_token: AtomicU64,
}

#[derive(Default)]
struct Slot {
    holder: AtomicU64,
    expires_at: AtomicU64,
}

/// A slot's holder when it holds no lease.
const FREE: u64 = 0;
/// A slot's holder while a grant fills it in.
const RESERVED: u64 = u64::MAX;
/// A slot's holder for a lease of an owner given by a caller.
const LISTED: u64 = u64::MAX - 1;
/// The largest token granted: the two above are holders, not tokens (the core's
/// transitions grant up to `u64::MAX`, after `2^63` grants more than a table can make).
const LAST_TOKEN: u64 = LISTED - 1;

impl Slots {
    fn new(max: u64) -> Self {
        Self {
            slots: (0..max).map(|_| Slot::default()).collect(),
            last_token: AtomicU64::new(0),
        }
    }

    /// A slot's holder and expiry, once no grant is filling it in.
    #[inline]
    fn settled(&self, slot: usize) -> (u64, Ticks) {
        let Some(slot) = self.slots.get(slot) else {
            return (FREE, 0);
        };
        let mut spins = 0u32;
        loop {
            let holder = slot.holder.load(Ordering::SeqCst);
            if holder != RESERVED {
                let expires_at = slot.expires_at.load(Ordering::SeqCst);
                // The holder unchanged, the expiry is its lease's.
                if slot.holder.load(Ordering::SeqCst) == holder {
                    return (holder, expires_at);
                }
            }
            spins = spins.saturating_add(1);
            if spins < 64 {
                core::hint::spin_loop();
            } else {
                // The granting thread was preempted: let it run.
                std::thread::yield_now();
            }
        }
    }

    /// The expiry of the lease `holder` holds in `slot`, if it is there and unexpired at
    /// `now`.
    #[inline]
    fn live(&self, slot: usize, holder: u64, now: Ticks) -> Option<Ticks> {
        let (found, expires_at) = self.settled(slot);
        (found == holder && expires_at > now).then_some(expires_at)
    }

    /// Sets the expiry of the lease in `slot`, held by the caller; returns it.
    fn set_expiry(&self, slot: usize, expires_at: Ticks) -> Ticks {
        if let Some(slot) = self.slots.get(slot) {
            slot.expires_at.store(expires_at, Ordering::SeqCst);
        }
        expires_at
    }

    /// Frees `slot`, whose listed lease the caller (under the table's lock) gives up.
    fn set_free(&self, slot: usize) {
        if let Some(slot) = self.slots.get(slot) {
            slot.holder.store(FREE, Ordering::SeqCst);
        }
    }

    /// Lists the lease granted to the host's owner with `token`, unexpired at `now`: its
    /// slot and expiry.
    fn list(&self, token: u64, now: Ticks) -> Option<(usize, Ticks)> {
        (0..self.slots.len()).find_map(|slot| {
            let expires_at = self.live(slot, token, now)?;
            self.replace(slot, token, LISTED)
                .then_some((slot, expires_at))
        })
    }

    /// Frees the lease of the host's owner granted with `token` in `slot` if it is
    /// unexpired at `live_at`; its expiry.
    #[inline]
    fn free(&self, slot: usize, token: u64, live_at: Ticks) -> Option<Ticks> {
        let place = self.slots.get(slot)?;
        if place.holder.load(Ordering::SeqCst) != token {
            return None;
        }
        // Its expiry, unless the lease was reclaimed meanwhile: then the
        // compare-and-swap fails.
        let expires_at = place.expires_at.load(Ordering::SeqCst);
        (expires_at > live_at && self.replace(slot, token, FREE)).then_some(expires_at)
    }

    #[inline]
    fn replace(&self, slot: usize, current: u64, holder: u64) -> bool {
        self.slots.get(slot).is_some_and(|s| {
            s.holder
                .compare_exchange(current, holder, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        })
    }

    /// Claims a free slot, lock-free, for a lease of the host's own owner; `None` if
    /// none is free.
    #[inline(always)]
    fn claim_free(
        &self,
        now: Ticks,
        expires_at: Ticks,
    ) -> Result<Option<(usize, Grant)>, LeaseError> {
        let len = self.slots.len();
        let start = first_slot(len);
        for slot in (start..len).chain(0..start) {
            if self.slots[slot].holder.load(Ordering::SeqCst) == FREE
                && self.replace(slot, FREE, RESERVED)
            {
                return self.fill(slot, now, expires_at, None).map(Some);
            }
        }
        Ok(None)
    }

    /// Claims a slot free or expired at `now` (under the table's lock, `listed`) for a
    /// lease expiring at `expires_at`, held by `holder` (`None`: the host's own owner, by
    /// its token), or the denial when all are held: its `retry_after` is the time until
    /// the earliest expires.
    fn claim(
        &self,
        listed: &mut Vec<Listed>,
        now: Ticks,
        expires_at: Ticks,
        holder: Option<u64>,
    ) -> Result<(usize, Grant), AcquireError> {
        let (mut earliest, mut latest) = (Ticks::MAX, 0);
        for slot in 0..self.slots.len() {
            loop {
                let (found, expiry) = self.settled(slot);
                if found != FREE && expiry > now {
                    earliest = earliest.min(expiry);
                    latest = latest.max(expiry);
                    break;
                }
                if self.replace(slot, found, RESERVED) {
                    // An expired listed lease leaves the list with its slot.
                    if found == LISTED {
                        listed.retain(|l| l.slot != slot);
                    }
                    return Ok(self.fill(slot, now, expires_at, holder)?);
                }
                // Freed or claimed by another thread meanwhile: read it again.
            }
        }
        let last = self.last_token.load(Ordering::SeqCst);
        let fresh_at = latest.max(last.saturating_add(1));
        let max = self.slots.len() as u64;
        Err(AcquireError::Busy(Decision::deny(
            max,
            0,
            Some(earliest - now),
            fresh_at - now,
        )))
    }

    /// Fills in `slot`, reserved by the caller: a token taken now, then the expiry and
    /// the holder (the token itself for the host's own owner).
    #[inline(always)]
    fn fill(
        &self,
        slot: usize,
        now: Ticks,
        expires_at: Ticks,
        holder: Option<u64>,
    ) -> Result<(usize, Grant), LeaseError> {
        let place = &self.slots[slot];
        let token = match self.next_token(now) {
            Ok(token) => token,
            Err(exhausted) => {
                place.holder.store(FREE, Ordering::SeqCst);
                return Err(exhausted);
            }
        };
        place.expires_at.store(expires_at, Ordering::Release);
        place
            .holder
            .store(holder.unwrap_or(token), Ordering::Release);
        Ok((slot, Grant::new(token, expires_at, 1)))
    }

    /// The next fencing token at `now`: `max(last + 1, now)`. One `fetch_add` while the
    /// tokens run ahead of the clock (wait-free), else a compare-and-swap.
    #[inline(always)]
    fn next_token(&self, now: Ticks) -> Result<u64, LeaseError> {
        let mut last = self.last_token.load(Ordering::SeqCst);
        // Far below the end, so that adds racing this one cannot pass it.
        if last >= now.saturating_sub(1) && last < LAST_TOKEN / 2 {
            return Ok(self.last_token.fetch_add(1, Ordering::SeqCst) + 1);
        }
        loop {
            let token = last
                .checked_add(1)
                .filter(|&t| t <= LAST_TOKEN)
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
}

/// Where this thread starts looking for a free slot of `len`: threads start four slots
/// (a cache line) apart, so that two of them rarely write the same line.
#[inline]
fn first_slot(len: usize) -> usize {
    static THREADS: AtomicUsize = AtomicUsize::new(0);
    std::thread_local!(static FIRST: Cell<usize> = const { Cell::new(usize::MAX) });
    let mut first = FIRST.get();
    if first == usize::MAX {
        first = THREADS.fetch_add(4, Ordering::Relaxed) & (usize::MAX >> 1);
        FIRST.set(first);
    }
    if first < len {
        first
    } else {
        first % len
    }
}

/// The owner of a lease of the host's own: `0xff` (which no UTF-8 text starts with)
/// and its token, unique in its table.
#[inline]
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
pub struct KeyedLeases<K, C = MonotonicClock, H = KeyHasher> {
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
        Self::with_hasher(concurrency, max_keys, clock, KeyHasher::default())
    }
}

impl<K: Hash + Eq + Send, C: Clock + Sync, H: BuildHasher + Sync> KeyedLeases<K, C, H> {
    /// Leases per key, hashing keys with `hasher` (the default is [`KeyHasher`]).
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
