//! Leases over sled: the core's [`Concurrency`] tables, one record per key, changed by
//! compare-and-swap like the limiters' states.

use sled::Tree;
use sluicegate_core::{
    check_now, Acquired, Clock, Concurrency, Grant, LeaseError, LeaseHost, LeaseRequest,
    LeaseState, MonotonicClock, Ticks,
};

use crate::error::Error;
use crate::record::{Durability, Records};

/// Concurrency limits and locks with fencing tokens over a sled tree: at most `max`
/// unexpired leases per key (see [`Concurrency`]). Each call is one atomic
/// read-modify-write of the key's record; the transition is pure, so a call that lost a
/// race is simply made again on the new record. A table that is fresh again (no lease
/// held) is kept, as its last token (25 bytes), so a later grant gets a larger token
/// however its call raced with the release (see `update`).
///
/// ```
/// use sluicegate_core::{Concurrency, LeaseRequest, SECOND};
/// use sluicegate_sled::{Create, Durability, SledLeases};
///
/// let dir = tempfile::tempdir()?;
/// let db = sluicegate_sled::open(&dir.path().join("locks"), Create::InExistingDir)?;
/// let locks = SledLeases::new(db.open_tree("locks")?, Concurrency::lock(), Durability::EveryDecision);
/// let export = LeaseRequest::new("nightly-export").ttl(30 * SECOND);
/// let grant = locks.acquire(&export.owner("worker-1"))?.grant.unwrap();
/// // Another owner is refused while the lease is held.
/// assert!(locks.acquire(&export.owner("worker-2"))?.grant.is_none());
/// // Pass `grant.token` with every write to the protected resource.
/// locks.release(&export.owner("worker-1"))?;
/// let next = locks.acquire(&export.owner("worker-2"))?.grant.unwrap();
/// assert!(next.token > grant.token);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct SledLeases<C = MonotonicClock> {
    records: Records<C>,
    leases: Concurrency,
}

impl SledLeases {
    /// Leases over `tree`, with no key prefix, on the process's [`MonotonicClock`].
    pub fn new(tree: Tree, leases: Concurrency, durability: Durability) -> Self {
        Self {
            records: Records::new(tree, durability),
            leases,
        }
    }
}

impl<C: Clock> SledLeases<C> {
    /// Stores every key under `prefix`, so several tables can share one tree.
    pub fn with_prefix(self, prefix: impl Into<Vec<u8>>) -> Self {
        Self {
            records: self.records.with_prefix(prefix.into()),
            ..self
        }
    }

    /// Reads time from `clock` instead.
    pub fn with_clock<D: Clock>(self, clock: D) -> SledLeases<D> {
        SledLeases {
            records: self.records.with_clock(clock),
            leases: self.leases,
        }
    }

    /// Grants the request's owner a lease on its key for its ttl if fewer than `max` are
    /// held (or re-enters the one it holds); a denial is a value with `retry_after` (see
    /// [`Concurrency::acquire`]). Without the request's own time, the clock is read after
    /// the record, on every attempt, so a call that lost a race decides at the time it
    /// retries.
    pub fn acquire(&self, request: &LeaseRequest<'_>) -> Result<Acquired, Error> {
        self.update(request, |state, now| {
            self.leases
                .acquire_in(state, now, request.owner, request.ttl)
        })
    }

    /// Releases the owner's lease once ([`LeaseError::NotHeld`] if it holds none); the
    /// lease is freed when released as often as acquired.
    pub fn release(&self, request: &LeaseRequest<'_>) -> Result<Grant, Error> {
        self.update(request, |state, now| {
            self.leases.release_in(state, now, request.owner)
        })
    }

    /// Extends the owner's unexpired lease to `now + ttl` ([`LeaseError::NotHeld`] if it
    /// holds none); its token stays.
    pub fn renew(&self, request: &LeaseRequest<'_>) -> Result<Grant, Error> {
        self.update(request, |state, now| {
            self.leases.renew_in(state, now, request.owner, request.ttl)
        })
    }

    /// The stored lease table of `key`, decoded (`None`: fresh). Leases listed may have
    /// expired since the last call; the next call drops them.
    pub fn state(&self, key: &[u8]) -> Result<Option<LeaseState>, Error> {
        self.records.read(key, |bytes| self.leases.decode(bytes))
    }

    /// The lease model.
    pub const fn leases(&self) -> &Concurrency {
        &self.leases
    }

    /// The tree the records live in.
    pub const fn tree(&self) -> &Tree {
        self.records.tree()
    }

    /// One atomic transition of the request's record at its time, or (none) at the time
    /// the clock reads after the record was read, on every attempt. A fresh table is
    /// kept, not deleted: its bytes hold the
    /// last token. After a deletion a call that had read the key as absent before it
    /// would still win its compare-and-swap (absent again) and grant a token below the
    /// deleted one; a kept record's bytes change with every grant, so a stale swap fails.
    fn update<T>(
        &self,
        request: &LeaseRequest<'_>,
        transition: impl Fn(&mut LeaseState, Ticks) -> Result<T, LeaseError>,
    ) -> Result<T, Error> {
        let leases = &self.leases;
        self.records.update(
            request.key,
            |bytes| leases.decode(bytes),
            |state| leases.encode_to_vec(state),
            |state| {
                let now = request.now.unwrap_or_else(|| self.records.clock.now());
                let now = check_now(now).map_err(Error::Time)?;
                let mut state = state.unwrap_or_default();
                let answer = transition(&mut state, now)?;
                Ok((answer, Some(state)))
            },
        )
    }
}

/// The host contract: each operation is the inherent one of the same name.
impl<C: Clock> LeaseHost for SledLeases<C> {
    type Error = Error;

    fn acquire(&self, request: &LeaseRequest<'_>) -> Result<Acquired, Error> {
        SledLeases::acquire(self, request)
    }

    fn release(&self, request: &LeaseRequest<'_>) -> Result<Grant, Error> {
        SledLeases::release(self, request)
    }

    fn renew(&self, request: &LeaseRequest<'_>) -> Result<Grant, Error> {
        SledLeases::renew(self, request)
    }

    fn state(&self, key: &[u8]) -> Result<Option<LeaseState>, Error> {
        SledLeases::state(self, key)
    }
}
