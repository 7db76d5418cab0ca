//! The lock-free slots of a [`Leases`](super::Leases) table.

use core::cell::Cell;
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::boxed::Box;
use std::vec::Vec;

use super::error::AcquireError;
use crate::{Decision, Grant, LeaseError, Ticks};

/// A lease whose owner a caller gave, kept beside its slot.
#[derive(Debug)]
pub(super) struct Listed {
    pub(super) owner: Box<[u8]>,
    pub(super) token: u64,
    pub(super) slot: usize,
    pub(super) holds: u64,
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
pub(super) struct Slots {
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
pub(super) const FREE: u64 = 0;
/// A slot's holder while a grant fills it in.
pub(super) const RESERVED: u64 = u64::MAX;
/// A slot's holder for a lease of an owner given by a caller.
pub(super) const LISTED: u64 = u64::MAX - 1;
/// The largest token granted: the two above are holders, not tokens (the core's
/// transitions grant up to `u64::MAX`, after `2^63` grants more than a table can make).
pub(super) const LAST_TOKEN: u64 = LISTED - 1;

impl Slots {
    pub(super) fn new(max: u64) -> Self {
        Self {
            slots: (0..max).map(|_| Slot::default()).collect(),
            last_token: AtomicU64::new(0),
        }
    }

    /// How many slots: the table's `max`.
    pub(super) fn len(&self) -> usize {
        self.slots.len()
    }

    /// The last fencing token granted.
    pub(super) fn last_token(&self) -> u64 {
        self.last_token.load(Ordering::SeqCst)
    }

    /// A slot's holder and expiry, once no grant is filling it in.
    #[inline]
    pub(super) fn settled(&self, slot: usize) -> (u64, Ticks) {
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
    pub(super) fn live(&self, slot: usize, holder: u64, now: Ticks) -> Option<Ticks> {
        let (found, expires_at) = self.settled(slot);
        (found == holder && expires_at > now).then_some(expires_at)
    }

    /// Sets the expiry of the lease in `slot`, held by the caller; returns it.
    pub(super) fn set_expiry(&self, slot: usize, expires_at: Ticks) -> Ticks {
        if let Some(slot) = self.slots.get(slot) {
            slot.expires_at.store(expires_at, Ordering::SeqCst);
        }
        expires_at
    }

    /// Frees `slot`, whose listed lease the caller (under the table's lock) gives up.
    pub(super) fn set_free(&self, slot: usize) {
        if let Some(slot) = self.slots.get(slot) {
            slot.holder.store(FREE, Ordering::SeqCst);
        }
    }

    /// Lists the lease granted to the host's owner with `token`, unexpired at `now`: its
    /// slot and expiry.
    pub(super) fn list(&self, token: u64, now: Ticks) -> Option<(usize, Ticks)> {
        (0..self.slots.len()).find_map(|slot| {
            let expires_at = self.live(slot, token, now)?;
            self.replace(slot, token, LISTED)
                .then_some((slot, expires_at))
        })
    }

    /// Frees the lease of the host's owner granted with `token` in `slot` if it is
    /// unexpired at `live_at`; its expiry.
    #[inline]
    pub(super) fn free(&self, slot: usize, token: u64, live_at: Ticks) -> Option<Ticks> {
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
    pub(super) fn replace(&self, slot: usize, current: u64, holder: u64) -> bool {
        self.slots.get(slot).is_some_and(|s| {
            s.holder
                .compare_exchange(current, holder, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        })
    }

    /// Claims a free slot, lock-free, for a lease of the host's own owner; `None` if
    /// none is free.
    #[inline(always)]
    pub(super) fn claim_free(
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
    pub(super) fn claim(
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
    pub(super) fn fill(
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
    pub(super) fn next_token(&self, now: Ticks) -> Result<u64, LeaseError> {
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
pub(super) fn first_slot(len: usize) -> usize {
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
pub(super) fn made_owner(token: u64) -> [u8; 9] {
    let mut owner = [0xff; 9];
    owner[1..].copy_from_slice(&token.to_be_bytes());
    owner
}

/// The token a [`made_owner`] names.
pub(super) fn made_token(owner: &[u8]) -> Option<u64> {
    match owner {
        [0xff, token @ ..] => Some(u64::from_be_bytes(token.try_into().ok()?)),
        _ => None,
    }
}
