//! Leases: concurrency limits and locks with fencing tokens, as pure transitions.
//!
//! A key's lease table holds at most `max` unexpired leases, each held by one owner until
//! it expires. A holder that crashes never returns its lease, so expiry does: every
//! transition first drops the leases whose expiry has passed, and a crashed holder's
//! permit is free again `ttl` after its last grant or renewal, never later.
//!
//! Every grant carries a **fencing token**, `max(last + 1, now)`: strictly greater than
//! every token granted before on the key. A resource that remembers the highest token it
//! has seen refuses a holder whose lease expired while it was paused (Kleppmann's answer
//! to lease-based locks). Tokens never repeat, also after the key is deleted: a state is
//! fresh (and may be deleted) only once no lease is held *and* `now` has passed its last
//! token, so the next grant on a fresh key, at a later `now`, gets a larger token. This
//! holds as long as the hosts' clock does not go back by more than the key's lifetime
//! (see docs/leases.md#fencing-tokens for what could break it).

use alloc::vec::Vec;

use crate::encoding::{self, tag, Reader};
use crate::limits::{MAX_LEASES, MAX_OWNER_LEN, MAX_PERIOD};
use crate::{Decision, DecodeError, ParamError, Ticks, MAX_TICKS};

/// At most `max` leases held at once per key, each owned by one holder until it expires
/// or is released. [`Concurrency::lock`] is a lock: one holder, reentrant.
///
/// An owner holds at most one lease per key: acquiring again while holding it re-enters
/// that lease (its hold count grows, its expiry is extended, its token stays), and it is
/// freed when released as many times as acquired. Give each request in flight its own
/// owner to count requests; give a process or task one owner to make a lock reentrant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Concurrency {
    max: u64,
}

/// The state of a key's lease table: the leases held and the last fencing token granted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct LeaseState {
    last_token: u64,
    /// Oldest grant first, so tokens ascend.
    leases: Vec<Lease>,
}

/// One lease in a [`LeaseState`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Lease {
    owner: Vec<u8>,
    token: u64,
    expires_at: Ticks,
    holds: u64,
}

impl Lease {
    /// A lease as a host holding leases apart from a [`LeaseState`] finds it.
    #[cfg(feature = "memory")]
    pub(crate) const fn new(owner: Vec<u8>, token: u64, expires_at: Ticks, holds: u64) -> Self {
        Self {
            owner,
            token,
            expires_at,
            holds,
        }
    }

    /// Who holds it.
    pub fn owner(&self) -> &[u8] {
        &self.owner
    }

    /// Its fencing token.
    pub const fn token(&self) -> u64 {
        self.token
    }

    /// The instant it expires unless renewed.
    pub const fn expires_at(&self) -> Ticks {
        self.expires_at
    }

    /// How many times its owner has acquired it without releasing.
    pub const fn holds(&self) -> u64 {
        self.holds
    }
}

impl LeaseState {
    /// The state of `leases` (oldest grant first) after `last_token`, for a host
    /// holding leases apart from a state.
    #[cfg(feature = "memory")]
    pub(crate) const fn new(last_token: u64, leases: Vec<Lease>) -> Self {
        Self { last_token, leases }
    }

    /// The leases held at the last transition, oldest grant first (some may have expired
    /// since; the next transition drops them).
    pub fn leases(&self) -> &[Lease] {
        &self.leases
    }

    /// The last fencing token granted on the key.
    pub const fn last_token(&self) -> u64 {
        self.last_token
    }

    /// Drops the leases expired at `now`.
    fn reclaim(&mut self, now: Ticks) {
        self.leases.retain(|lease| lease.expires_at > now);
    }

    /// Where `owner`'s lease is, if it is unexpired at `now`.
    fn live_position(&self, owner: &[u8], now: Ticks) -> Option<usize> {
        self.leases
            .iter()
            .position(|lease| lease.owner == owner && lease.expires_at > now)
    }

    /// Applies `change` to `owner`'s lease unexpired at `now`, drops it if that leaves it
    /// no holds, then reclaims the expired ones: the lease as changed, or
    /// [`LeaseError::NotHeld`] with the state untouched.
    fn change_held(
        &mut self,
        now: Ticks,
        owner: &[u8],
        change: impl FnOnce(&mut Lease, Ticks),
    ) -> Result<Grant, LeaseError> {
        let now = now.min(MAX_TICKS);
        let i = self.live_position(owner, now).ok_or(LeaseError::NotHeld)?;
        let lease = &mut self.leases[i];
        change(lease, now);
        let grant = grant_of(lease);
        if lease.holds == 0 {
            self.leases.remove(i);
        }
        self.reclaim(now);
        Ok(grant)
    }

    /// The number of leases unexpired at `now`.
    fn live(&self, now: Ticks) -> usize {
        self.leases.iter().filter(|l| l.expires_at > now).count()
    }

    /// `owner`'s lease if it is unexpired at `now`.
    pub fn held(&self, owner: &[u8], now: Ticks) -> Option<&Lease> {
        self.live_position(owner, now.min(MAX_TICKS))
            .map(|i| &self.leases[i])
    }

    /// Whether the state is fresh at `now` (nothing held and the clock past the last
    /// token), so a host may delete it: a later grant still gets a larger token.
    pub fn is_fresh(&self, now: Ticks) -> bool {
        self.fresh_after(now) == 0
    }

    /// The time from `now` until the state is fresh (0 when [`is_fresh`](Self::is_fresh)):
    /// what a host sets as the key's time to live, and every acquire's `reset_after`.
    pub fn fresh_after(&self, now: Ticks) -> Ticks {
        self.fresh_at().saturating_sub(now.min(MAX_TICKS))
    }

    /// The instant the state is fresh: no lease held and the clock past the last token.
    pub fn fresh_at(&self) -> Ticks {
        let expiry = self.leases.iter().map(|l| l.expires_at).max().unwrap_or(0);
        expiry.max(self.last_token.saturating_add(1))
    }
}

/// A lease granted, re-entered or renewed: what its holder needs to act safely.
#[must_use = "the token is what the protected resource checks"]
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Grant {
    /// The fencing token: pass it to the protected resource with every write.
    pub token: u64,
    /// The instant the lease expires unless renewed.
    pub expires_at: Ticks,
    /// How many times the owner now holds it.
    pub holds: u64,
}

impl Grant {
    /// A grant as a host reports it: hosts that run the transition elsewhere (a Redis
    /// script, a remote service) build the core's type instead of a parallel one, so one
    /// type describes a lease everywhere.
    pub const fn new(token: u64, expires_at: Ticks, holds: u64) -> Self {
        Self {
            token,
            expires_at,
            holds,
        }
    }
}

/// The answer to [`Concurrency::acquire`].
#[must_use = "a denied acquire holds nothing"]
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Acquired {
    /// `limit` is `max`, `remaining` the leases still free after this call,
    /// `retry_after` the time until the earliest lease expires when denied, and
    /// `reset_after` the time until the state is fresh.
    pub decision: Decision,
    /// The lease, when granted.
    pub grant: Option<Grant>,
}

impl Acquired {
    /// An answer as a host reports it (see [`Grant::new`]): `grant` is `Some` exactly
    /// when `decision` admits.
    pub const fn new(decision: Decision, grant: Option<Grant>) -> Self {
        Self { decision, grant }
    }
}

/// A lease call that cannot be carried out; the state is left as it was.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LeaseError {
    /// A parameter (the owner's length, the ttl) is outside its range.
    #[error(transparent)]
    Param(#[from] ParamError),
    /// The owner holds no unexpired lease on the key (never acquired, released, or
    /// expired: its holder must stop acting on it).
    #[error("the owner holds no lease on this key (never acquired, released, or expired)")]
    NotHeld,
    /// The owner re-entered its lease more times than a hold count can record.
    #[error("the owner holds this lease too many times")]
    TooManyHolds,
    /// Every fencing token has been granted (after 2^64 grants).
    #[error("no fencing token is left for this key")]
    TokensExhausted,
}

impl Concurrency {
    /// At most `max` (1..=1024) leases held at once per key.
    pub fn new(max: u64) -> Result<Self, ParamError> {
        Ok(Self {
            max: ParamError::check("max", max, 1, MAX_LEASES)?,
        })
    }

    /// A lock: one holder at a time, reentrant.
    pub const fn lock() -> Self {
        Self { max: 1 }
    }

    /// The most leases held at once.
    pub const fn max(&self) -> u64 {
        self.max
    }

    /// Checks an owner (1..=128 bytes) and a ttl (1 tick..=366 days) as every transition
    /// does: a host whose transition runs elsewhere (a script, a module) calls it before
    /// sending anything, so a bad argument is the same typed error in every host.
    pub fn check(owner: &[u8], ttl: Ticks) -> Result<(), LeaseError> {
        check_owner(owner)?;
        check_ttl(ttl)?;
        Ok(())
    }

    /// Grants `owner` a lease for `ttl` ticks if fewer than `max` are held (or re-enters
    /// the one it holds); otherwise denies, with `retry_after` the time until the
    /// earliest lease expires.
    pub fn acquire(
        &self,
        state: Option<LeaseState>,
        now: Ticks,
        owner: &[u8],
        ttl: Ticks,
    ) -> Result<(Acquired, Option<LeaseState>), LeaseError> {
        let mut state = state.unwrap_or_default();
        let acquired = self.acquire_in(&mut state, now, owner, ttl)?;
        Ok((acquired, fresh_or(state, now)))
    }

    /// Releases `owner`'s lease once; it is freed when released as often as acquired.
    /// Returns the lease as it stands (`holds` 0 when freed).
    pub fn release(
        &self,
        state: Option<LeaseState>,
        now: Ticks,
        owner: &[u8],
    ) -> Result<(Grant, Option<LeaseState>), LeaseError> {
        check_owner(owner)?;
        let mut state = state.ok_or(LeaseError::NotHeld)?;
        let grant = self.release_in(&mut state, now, owner)?;
        Ok((grant, fresh_or(state, now)))
    }

    /// Extends `owner`'s unexpired lease to `now + ttl`; its token stays.
    pub fn renew(
        &self,
        state: Option<LeaseState>,
        now: Ticks,
        owner: &[u8],
        ttl: Ticks,
    ) -> Result<(Grant, Option<LeaseState>), LeaseError> {
        Self::check(owner, ttl)?;
        let mut state = state.ok_or(LeaseError::NotHeld)?;
        let grant = self.renew_in(&mut state, now, owner, ttl)?;
        Ok((grant, fresh_or(state, now)))
    }

    /// [`acquire`](Self::acquire) on a state held in place (an in-memory host's table):
    /// on an error the state is left exactly as it was, so the host need not copy it
    /// first. The state may be deleted when [`LeaseState::is_fresh`] at `now`.
    pub fn acquire_in(
        &self,
        state: &mut LeaseState,
        now: Ticks,
        owner: &[u8],
        ttl: Ticks,
    ) -> Result<Acquired, LeaseError> {
        Self::check(owner, ttl)?;
        let now = now.min(MAX_TICKS);
        let expires_at = now + ttl;
        // Everything that can fail is checked before the state is touched.
        let grant = if let Some(i) = state.live_position(owner, now) {
            let lease = &mut state.leases[i];
            lease.holds = lease.holds.checked_add(1).ok_or(LeaseError::TooManyHolds)?;
            lease.expires_at = lease.expires_at.max(expires_at);
            let grant = grant_of(lease);
            state.reclaim(now);
            Some(grant)
        } else if (state.live(now) as u64) < self.max {
            let token = state
                .last_token
                .checked_add(1)
                .ok_or(LeaseError::TokensExhausted)?
                .max(now);
            state.reclaim(now);
            state.last_token = token;
            let lease = Lease {
                owner: owner.to_vec(),
                token,
                expires_at,
                holds: 1,
            };
            let grant = grant_of(&lease);
            state.leases.push(lease);
            Some(grant)
        } else {
            state.reclaim(now);
            None
        };
        let remaining = self.max - state.leases.len() as u64;
        let reset_after = state.fresh_after(now);
        let decision = match grant {
            Some(_) => Decision::admit(self.max, remaining, reset_after, 0),
            None => {
                let earliest = state.leases.iter().map(|l| l.expires_at).min();
                let retry = earliest.map_or(0, |t| t - now);
                Decision::deny(self.max, remaining, Some(retry), reset_after)
            }
        };
        Ok(Acquired { decision, grant })
    }

    /// [`release`](Self::release) on a state held in place; on an error the state is
    /// left exactly as it was.
    pub fn release_in(
        &self,
        state: &mut LeaseState,
        now: Ticks,
        owner: &[u8],
    ) -> Result<Grant, LeaseError> {
        check_owner(owner)?;
        state.change_held(now, owner, |lease, _| lease.holds -= 1)
    }

    /// [`renew`](Self::renew) on a state held in place; on an error the state is left
    /// exactly as it was.
    pub fn renew_in(
        &self,
        state: &mut LeaseState,
        now: Ticks,
        owner: &[u8],
        ttl: Ticks,
    ) -> Result<Grant, LeaseError> {
        Self::check(owner, ttl)?;
        state.change_held(now, owner, |lease, now| lease.expires_at = now + ttl)
    }

    /// Appends the canonical encoding of `state`: the last token and the number of
    /// leases, then per lease its token, expiry, hold count, owner length and owner.
    pub fn encode<E: Extend<u8>>(&self, state: &LeaseState, out: &mut E) {
        encoding::write(
            out,
            tag::LEASES,
            &[state.last_token, state.leases.len() as u64],
        );
        for lease in &state.leases {
            let len = lease.owner.len() as u64;
            for field in [lease.token, lease.expires_at, lease.holds, len] {
                out.extend(field.to_be_bytes());
            }
            out.extend(lease.owner.iter().copied());
        }
    }

    /// The canonical encoding of `state` as a new vector.
    pub fn encode_to_vec(&self, state: &LeaseState) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode(state, &mut out);
        out
    }

    /// Reads a state written by [`encode`](Self::encode) for the same `max`. Bytes no
    /// valid state encodes (more leases than `max`, tokens out of order or above the
    /// last, an empty or repeated owner) are an error, never a panic.
    pub fn decode(&self, bytes: &[u8]) -> Result<LeaseState, DecodeError> {
        let mut reader = Reader::new(bytes, tag::LEASES)?;
        let last_token = reader.u64()?;
        let count = reader.u64_where("count", &|n| n <= self.max)?;
        // `count <= max <= 1024`, so this reserves little whatever the bytes say.
        let mut leases: Vec<Lease> = Vec::with_capacity(to_usize(count));
        for _ in 0..count {
            let after = leases.last().map_or(0, |l| l.token);
            let token = reader.u64_where("token", &|t| t > after && t <= last_token)?;
            let expires_at = reader.u64_where("expires_at", &|t| t <= MAX_TICKS + MAX_PERIOD)?;
            let holds = reader.u64_where("holds", &|h| h >= 1)?;
            let len = reader.u64_where("owner_len", &|n| (1..=MAX_OWNER_LEN).contains(&n))?;
            let owner = reader.take(to_usize(len))?;
            if leases.iter().any(|l| l.owner == owner) {
                return Err(DecodeError::InvalidField { field: "owner" });
            }
            leases.push(Lease {
                owner: owner.to_vec(),
                token,
                expires_at,
                holds,
            });
        }
        reader.finish()?;
        Ok(LeaseState { last_token, leases })
    }
}

#[inline]
pub(crate) fn check_owner(owner: &[u8]) -> Result<(), ParamError> {
    ParamError::check("owner length", owner.len() as u64, 1, MAX_OWNER_LEN).map(|_| ())
}

#[inline]
pub(crate) fn check_ttl(ttl: Ticks) -> Result<(), ParamError> {
    ParamError::check("ttl", ttl, 1, MAX_PERIOD).map(|_| ())
}

/// A count already checked to be small (at most [`MAX_LEASES`] or [`MAX_OWNER_LEN`]).
fn to_usize(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

fn grant_of(lease: &Lease) -> Grant {
    Grant {
        token: lease.token,
        expires_at: lease.expires_at,
        holds: lease.holds,
    }
}

/// `None` once nothing is held and the clock has passed the last token, so a later grant
/// on the deleted key still gets a larger token.
fn fresh_or(state: LeaseState, now: Ticks) -> Option<LeaseState> {
    (!state.is_fresh(now)).then_some(state)
}
