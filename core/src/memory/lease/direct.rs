//! One concurrency limit for the whole process.

use core::fmt;
use std::time::Duration;
use std::vec::Vec;

use super::error::{AcquireError, Released};
use super::guard::{Held, Host, LeaseGuard, Owner};
use super::slots::{made_owner, made_token, Listed, Slots, FREE, LISTED};
use super::wait::Waitable;
use crate::lease::{check_owner, check_ttl};
use crate::{
    Clock, Concurrency, Grant, Lease, LeaseError, LeaseState, MonotonicClock, Ticks, MAX_TICKS,
};

/// One [`Concurrency`] limit for the whole process: at most `max` leases held at once,
/// each by the guards of one owner.
///
/// ```
/// use std::time::Duration;
/// use sluicegate_core::memory::Leases;
/// use sluicegate_core::lease::Concurrency;
/// use sluicegate_core::SECOND;
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
        let mut leases: Vec<Lease> = (0..self.slots.len())
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
        LeaseState::new(self.slots.last_token(), leases)
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

impl<C> fmt::Debug for Leases<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leases")
            .field("concurrency", &self.concurrency)
            .finish_non_exhaustive()
    }
}
