//! The guard of a lease held, which gives it back to its host when dropped.

use core::cell::Cell;
use core::fmt;
use core::sync::atomic::{AtomicU64, Ordering};
use std::boxed::Box;
#[cfg(feature = "tokio")]
use std::sync::Arc;

use super::error::Released;
use super::slots::made_owner;
use crate::lease::check_owner;
use crate::{Grant, LeaseError, Ticks};

/// A lease held: released when dropped (or by [`release`](Self::release)).
///
/// Forgetting a guard (`std::mem::forget`) is the in-process crash: the lease is freed
/// when it expires, `ttl` after its last grant or renewal, and not before.
#[must_use = "dropping the guard releases the lease at once"]
pub struct LeaseGuard<'a, K = ()> {
    host: HostRef<'a, K>,
    key: K,
    owner: Owner,
    /// Where a [`Leases`](crate::memory::Leases) table holds the lease (0 for a keyed one).
    slot: usize,
    grant: Grant,
    held: bool,
}

/// The table a guard gives its lease back to: borrowed, or shared (an owned guard).
pub(super) enum HostRef<'a, K> {
    Borrowed(&'a dyn Host<K>),
    /// Only `acquire_owned_async` (tokio) makes one.
    #[cfg(feature = "tokio")]
    Shared(Arc<dyn Host<K> + Send + 'a>),
}

impl<'a, K> HostRef<'a, K> {
    pub(super) fn get(&self) -> &(dyn Host<K> + 'a) {
        match self {
            Self::Borrowed(host) => *host,
            #[cfg(feature = "tokio")]
            Self::Shared(host) => &**host,
        }
    }
}

impl<'a, K> LeaseGuard<'a, K> {
    pub(super) fn new(
        host: &'a dyn Host<K>,
        key: K,
        owner: Owner,
        slot: usize,
        grant: Grant,
    ) -> Self {
        Self::with_host(HostRef::Borrowed(host), key, owner, slot, grant)
    }

    pub(super) fn with_host(
        host: HostRef<'a, K>,
        key: K,
        owner: Owner,
        slot: usize,
        grant: Grant,
    ) -> Self {
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
    pub(super) fn held(&self) -> Held<'_> {
        Held {
            owner: self.owner.bytes(),
            token: self.grant.token,
            slot: self.slot,
        }
    }

    /// The fencing token: pass it with every write to the protected resource, which
    /// refuses a token below the highest it has seen (see
    /// [`FencedResource`](crate::memory::FencedResource)).
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

    /// The key it is held on (`()` for [`Leases`](crate::memory::Leases)).
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
pub(super) trait Host<K>: Sync {
    /// Releases the guard's lease on `key` if it is still the one granted to it; at the
    /// table's latest time unless `read_clock`.
    fn release(&self, key: &K, held: &Held<'_>, read_clock: bool) -> Released;
    /// Renews the guard's lease on `key` if it is still the one granted to it.
    fn renew(&self, key: &K, held: &Held<'_>, ttl: Ticks) -> Released;
}

/// A guard's lease as its host finds it: the owner, the token granted, and the slot of
/// a [`Leases`](crate::memory::Leases) table.
pub(super) struct Held<'g> {
    pub(super) owner: &'g [u8],
    pub(super) token: u64,
    pub(super) slot: usize,
}

/// A guard's owner: a number made for it (no allocation), or one the caller gave.
pub(super) enum Owner {
    /// `0xff` (which no UTF-8 text starts with) and a 64-bit number unique in its table
    /// (see [`made_owner`]).
    Made([u8; 9]),
    Given(Box<[u8]>),
}

impl Owner {
    /// The owner given, checked, or a new one unique in the process.
    pub(super) fn new(given: Option<&[u8]>) -> Result<Self, LeaseError> {
        Ok(match given {
            Some(given) => {
                check_owner(given)?;
                Self::Given(given.into())
            }
            None => Self::Made(made_owner(next_owner_id())),
        })
    }

    pub(super) fn bytes(&self) -> &[u8] {
        match self {
            Self::Made(bytes) => bytes,
            Self::Given(bytes) => bytes,
        }
    }
}

/// A number unique in the process. Each thread takes numbers from a block of 2^32 of
/// its own, so threads do not contend on one counter.
pub(super) fn next_owner_id() -> u64 {
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
