//! Leases over sled: the core's [`Concurrency`] tables, one record per key, changed by
//! compare-and-swap like the limiters' states.

use sled::Tree;
use tollgate_core::{
    check_now, Acquired, Clock, Concurrency, Grant, LeaseState, MonotonicClock, Ticks,
};

use crate::{corrupt, swap, Durability, Error};

/// Concurrency limits and locks with fencing tokens over a sled tree: at most `max`
/// unexpired leases per key (see [`Concurrency`]). Each call is one atomic
/// read-modify-write of the key's record; the transition is pure, so a call that lost a
/// race is simply made again on the new record. A table that is fresh again (no lease
/// held, and the clock past its last token) is deleted, and a later grant still gets a
/// larger token.
///
/// ```
/// use tollgate_core::{Concurrency, SECOND};
/// use tollgate_sled::{Create, Durability, SledLeases};
///
/// let dir = tempfile::tempdir()?;
/// let db = tollgate_sled::open(&dir.path().join("locks"), Create::InExistingDir)?;
/// let locks = SledLeases::new(db.open_tree("locks")?, Concurrency::lock(), Durability::EveryDecision);
/// let grant = locks.acquire(b"nightly-export", b"worker-1", 30 * SECOND)?.grant.unwrap();
/// // Another owner is refused while the lease is held.
/// assert!(locks.acquire(b"nightly-export", b"worker-2", 30 * SECOND)?.grant.is_none());
/// // Pass `grant.token` with every write to the protected resource.
/// locks.release(b"nightly-export", b"worker-1")?;
/// let next = locks.acquire(b"nightly-export", b"worker-2", 30 * SECOND)?.grant.unwrap();
/// assert!(next.token > grant.token);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct SledLeases<C = MonotonicClock> {
    tree: Tree,
    leases: Concurrency,
    prefix: Vec<u8>,
    durability: Durability,
    clock: C,
}

impl SledLeases {
    /// Leases over `tree`, with no key prefix, on the process's [`MonotonicClock`].
    pub fn new(tree: Tree, leases: Concurrency, durability: Durability) -> Self {
        Self {
            tree,
            leases,
            prefix: Vec::new(),
            durability,
            clock: MonotonicClock,
        }
    }
}

impl<C: Clock> SledLeases<C> {
    /// Stores every key under `prefix`, so several tables can share one tree.
    pub fn with_prefix(self, prefix: impl Into<Vec<u8>>) -> Self {
        Self {
            prefix: prefix.into(),
            ..self
        }
    }

    /// Reads time from `clock` instead.
    pub fn with_clock<D: Clock>(self, clock: D) -> SledLeases<D> {
        SledLeases {
            tree: self.tree,
            leases: self.leases,
            prefix: self.prefix,
            durability: self.durability,
            clock,
        }
    }

    /// [`acquire_at`](Self::acquire_at) now.
    pub fn acquire(&self, key: &[u8], owner: &[u8], ttl: Ticks) -> Result<Acquired, Error> {
        self.acquire_at(key, self.clock.now(), owner, ttl)
    }

    /// [`release_at`](Self::release_at) now.
    pub fn release(&self, key: &[u8], owner: &[u8]) -> Result<Grant, Error> {
        self.release_at(key, self.clock.now(), owner)
    }

    /// [`renew_at`](Self::renew_at) now.
    pub fn renew(&self, key: &[u8], owner: &[u8], ttl: Ticks) -> Result<Grant, Error> {
        self.renew_at(key, self.clock.now(), owner, ttl)
    }

    /// Grants `owner` a lease on `key` for `ttl` ticks from `now` if fewer than `max`
    /// are held (or re-enters the one it holds); a denial is a value with `retry_after`
    /// (see [`Concurrency::acquire`]).
    pub fn acquire_at(
        &self,
        key: &[u8],
        now: Ticks,
        owner: &[u8],
        ttl: Ticks,
    ) -> Result<Acquired, Error> {
        let now = check_now(now).map_err(Error::Time)?;
        self.update(key, |state| self.leases.acquire(state, now, owner, ttl))
    }

    /// Releases `owner`'s lease on `key` once ([`LeaseError::NotHeld`] if it holds none);
    /// the lease is freed when released as often as acquired.
    ///
    /// [`LeaseError::NotHeld`]: tollgate_core::LeaseError::NotHeld
    pub fn release_at(&self, key: &[u8], now: Ticks, owner: &[u8]) -> Result<Grant, Error> {
        let now = check_now(now).map_err(Error::Time)?;
        self.update(key, |state| self.leases.release(state, now, owner))
    }

    /// Extends `owner`'s unexpired lease on `key` to `now + ttl`
    /// ([`LeaseError::NotHeld`] if it holds none); its token stays.
    ///
    /// [`LeaseError::NotHeld`]: tollgate_core::LeaseError::NotHeld
    pub fn renew_at(
        &self,
        key: &[u8],
        now: Ticks,
        owner: &[u8],
        ttl: Ticks,
    ) -> Result<Grant, Error> {
        let now = check_now(now).map_err(Error::Time)?;
        self.update(key, |state| self.leases.renew(state, now, owner, ttl))
    }

    /// The stored lease table of `key`, decoded (`None`: fresh). Leases listed may have
    /// expired since the last call; the next call drops them.
    pub fn state(&self, key: &[u8]) -> Result<Option<LeaseState>, Error> {
        let record = self.tree.get(self.record_key(key))?;
        record
            .map(|bytes| self.leases.decode(&bytes).map_err(|e| corrupt(key, e)))
            .transpose()
    }

    /// The lease model.
    pub const fn leases(&self) -> &Concurrency {
        &self.leases
    }

    /// The tree the records live in.
    pub const fn tree(&self) -> &Tree {
        &self.tree
    }

    fn record_key(&self, key: &[u8]) -> Vec<u8> {
        [self.prefix.as_slice(), key].concat()
    }

    fn update<T, E>(
        &self,
        key: &[u8],
        transition: impl Fn(Option<LeaseState>) -> Result<(T, Option<LeaseState>), E>,
    ) -> Result<T, Error>
    where
        Error: From<E>,
    {
        swap(
            &self.tree,
            &self.record_key(key),
            self.durability,
            |bytes| self.leases.decode(bytes).map_err(|e| corrupt(key, e)),
            |state| self.leases.encode_to_vec(state),
            |state| transition(state).map_err(Error::from),
        )
    }
}
