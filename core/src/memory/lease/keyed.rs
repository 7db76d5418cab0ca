//! A concurrency limit per key.

use core::borrow::Borrow;
use core::fmt;
use core::hash::{BuildHasher, Hash};
use std::borrow::ToOwned;
#[cfg(feature = "tokio")]
use std::sync::Arc;
use std::time::Duration;
use std::vec::Vec;

use super::error::{AcquireError, Released};
#[cfg(feature = "tokio")]
use super::guard::HostRef;
use super::guard::{Held, Host, LeaseGuard, Owner};
use super::wait::Waitable;
use crate::memory::keyed::time;
use crate::memory::lease_table::{advance, Entry, Shard, Shards};
use crate::memory::KeyHasher;
use crate::{
    Acquired, Clock, Concurrency, Decision, Grant, Lease, LeaseError, LeaseHost, LeaseRequest,
    LeaseState, MonotonicClock, Ticks,
};

/// A [`Concurrency`] limit per key (a lock per resource name, a cap on requests in
/// flight per user), holding at most `max_keys` keys.
///
/// Keys live in shards like a [`KeyedLimiter`](crate::memory::KeyedLimiter)'s. A key is dropped
/// once its state is fresh (nothing held and the clock past its last token, so a later
/// grant still gets a larger token), at once when a release leaves it fresh and by a
/// sweep whenever a shard has doubled. A key in use is never evicted: a shard full of
/// keys in use answers a new key with [`AcquireError::Busy`] until one is fresh, after
/// one sweep: the shard remembers when its earliest key is fresh and refuses without
/// another until then, so a table filled by long leases costs each refusal no more than
/// a lookup. [`len`](Self::len), [`capacity`](Self::capacity) and
/// [`refused`](Self::refused) say how full it is.
pub struct KeyedLeases<K, C = MonotonicClock, H = KeyHasher> {
    concurrency: Concurrency,
    clock: C,
    hasher: H,
    shards: Shards<Waitable<Shard<K, LeaseState>>>,
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
        Self {
            concurrency,
            clock,
            hasher,
            shards: Shards::new(max_keys, Waitable::new),
        }
    }

    /// A lease on `key` for `ttl` ticks now; see [`Leases::try_acquire`](crate::memory::Leases::try_acquire).
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
    /// [`Leases::acquire`](crate::memory::Leases::acquire).
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
        let attempt = |shard: &mut Shard<K, LeaseState>, read| {
            granted(self.attempt(shard, read, hash, key, owner.bytes(), ttl))
        };
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

    /// [`acquire`](Self::acquire) as a future; see [`Leases::acquire_async`](crate::memory::Leases::acquire_async).
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
                |shard, read| granted(self.attempt(shard, read, hash, key, owner.bytes(), ttl)),
            )
            .await?;
        Ok((owner, grant))
    }

    /// Acquires for `owner` on `key` in its locked `shard` at `read` (or the shard's
    /// later time, see [`advance`]): a denial, or a shard full of keys in use, is an
    /// answer; only a parameter, holds or tokens out of range is an error.
    fn attempt<Q>(
        &self,
        shard: &mut Shard<K, LeaseState>,
        read: Ticks,
        hash: u64,
        key: &Q,
        owner: &[u8],
        ttl: Ticks,
    ) -> Result<Acquired, LeaseError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let now = advance(&mut shard.now, read);
        if let Some(entry) = shard.table.find_mut(hash, |e| e.key.borrow() == key) {
            return self
                .concurrency
                .acquire_in(&mut entry.state, now, owner, ttl);
        }
        // A fresh key is always granted (or refused for a parameter): it needs room.
        let mut state = LeaseState::default();
        let acquired = self.concurrency.acquire_in(&mut state, now, owner, ttl)?;
        if let Err(retry) = shard.make_room(now) {
            self.shards.refuse();
            let full = Decision::deny(self.concurrency.max(), 0, Some(retry), 0);
            return Ok(Acquired::new(full, None));
        }
        let entry = Entry {
            hash,
            key: key.to_owned(),
            state,
        };
        shard.table.insert_unique(hash, entry, |e| e.hash);
        Ok(acquired)
    }

    /// A lease on `key` for `owner` for `ttl` ticks now, held by the owner rather than
    /// by a guard: until [`release_by`](Self::release_by) gives it back (as often as it
    /// was acquired) or it expires. For hosts whose callers hold a lease across calls
    /// (a service); a lease acquired again by its owner is re-entered. The
    /// [`LeaseHost`] operations do the same with the time given by name.
    pub fn acquire_by<Q>(&self, key: &Q, owner: &[u8], ttl: Ticks) -> Result<Grant, AcquireError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let (hash, read) = (self.hasher.hash_one(key), self.clock.now());
        granted(self.attempt(&mut self.shard(hash).lock(), read, hash, key, owner, ttl))
    }

    /// Gives back one hold of `owner`'s lease on `key`: the lease as it stands (`holds`
    /// 0 when freed), or [`LeaseError::NotHeld`] if the owner holds no unexpired lease.
    pub fn release_by<Q>(&self, key: &Q, owner: &[u8]) -> Result<Grant, LeaseError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.release_at(key, self.clock.now(), owner)
    }

    /// [`release_by`](Self::release_by) at `read` (or the shard's later time).
    fn release_at<Q>(&self, key: &Q, read: Ticks, owner: &[u8]) -> Released
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.with_state(key, read, |state, now| {
            self.concurrency.release_in(state, now, owner)
        })
    }

    /// Extends `owner`'s unexpired lease on `key` to `ttl` ticks from now, its token
    /// kept: the lease as it stands, or [`LeaseError::NotHeld`].
    pub fn renew_by<Q>(&self, key: &Q, owner: &[u8], ttl: Ticks) -> Result<Grant, LeaseError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.renew_at(key, self.clock.now(), owner, ttl)
    }

    /// [`renew_by`](Self::renew_by) at `read` (or the shard's later time).
    fn renew_at<Q>(&self, key: &Q, read: Ticks, owner: &[u8], ttl: Ticks) -> Released
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.with_state(key, read, |state, now| {
            self.concurrency.renew_in(state, now, owner, ttl)
        })
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

    /// The limit each key has.
    pub const fn concurrency(&self) -> &Concurrency {
        &self.concurrency
    }

    /// The clock expiries are read on.
    pub const fn clock(&self) -> &C {
        &self.clock
    }

    fn shard(&self, hash: u64) -> &Waitable<Shard<K, LeaseState>> {
        self.shards.of(hash)
    }

    /// Applies `op` to `key`'s state at `read` (or the shard's later time, see
    /// [`advance`]); drops the key if that leaves it fresh. A key not held gets a fresh
    /// state, not stored: `op` refuses a bad parameter before saying the lease is not
    /// held, as the pure transitions do.
    fn with_state<Q>(
        &self,
        key: &Q,
        read: Ticks,
        op: impl FnOnce(&mut LeaseState, Ticks) -> Released,
    ) -> Released
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hasher.hash_one(key);
        let waitable = self.shard(hash);
        let mut shard = waitable.lock();
        let now = advance(&mut shard.now, read);
        let Ok(mut entry) = shard.table.find_entry(hash, |e| e.key.borrow() == key) else {
            return op(&mut LeaseState::default(), now);
        };
        let done = op(&mut entry.get_mut().state, now);
        let fresh_at = entry.get().state.fresh_at();
        if entry.get().state.is_fresh(now) {
            entry.remove();
        } else {
            // A release can bring the key's end forward.
            shard.ends_by(fresh_at);
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
        let read = if read_clock { self.clock.now() } else { 0 };
        self.with_state(key, read, |state, now| {
            give_back(&self.concurrency, state, now, held.owner, held.token)
        })
    }

    fn renew(&self, key: &K, held: &Held<'_>, ttl: Ticks) -> Released {
        self.with_state(key, self.clock.now(), |state, now| {
            extend(&self.concurrency, state, now, held.owner, held.token, ttl)
        })
    }
}

/// The lease contract on byte keys. A request with its own `now` acts at that time
/// (refused beyond [`MAX_TICKS`](crate::MAX_TICKS)), one without at the clock's; a key
/// acted on at both acts at the later of the two, so a fencing token never repeats. A
/// denial, and a table full of keys in use, is an [`Acquired`] without a grant.
impl<C, H> LeaseHost for KeyedLeases<Vec<u8>, C, H>
where
    C: Clock + Sync,
    H: BuildHasher + Sync,
{
    type Error = LeaseError;

    fn acquire(&self, r: &LeaseRequest<'_>) -> Result<Acquired, LeaseError> {
        let LeaseRequest {
            key,
            owner,
            ttl,
            now,
        } = *r;
        let (hash, read) = (self.hasher.hash_one(key), time(now, &self.clock)?);
        self.attempt(&mut self.shard(hash).lock(), read, hash, key, owner, ttl)
    }

    fn release(&self, r: &LeaseRequest<'_>) -> Result<Grant, LeaseError> {
        self.release_at(r.key, time(r.now, &self.clock)?, r.owner)
    }

    fn renew(&self, r: &LeaseRequest<'_>) -> Result<Grant, LeaseError> {
        self.renew_at(r.key, time(r.now, &self.clock)?, r.owner, r.ttl)
    }

    fn state(&self, key: &[u8]) -> Result<Option<LeaseState>, LeaseError> {
        Ok(KeyedLeases::state(self, key))
    }
}

impl<K, C, H> fmt::Debug for KeyedLeases<K, C, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedLeases")
            .field("concurrency", &self.concurrency)
            .field("shards", &self.shards.count())
            .finish_non_exhaustive()
    }
}

/// The lease `acquired` granted, or [`AcquireError::Busy`] with the denial: what a
/// caller that waits for a grant needs.
fn granted(acquired: Result<Acquired, LeaseError>) -> Result<Grant, AcquireError> {
    let acquired = acquired?;
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
