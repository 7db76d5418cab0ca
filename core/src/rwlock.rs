//! Read-write locks and fair queues: the lock family as pure transitions over an explicit
//! clock, each holder a lease with an owner, an expiry and a fencing token.
//!
//! One [`RwLease`] serves three locks, by the modes its callers ask for:
//! - **exclusive**: every caller asks [`LockMode::Exclusive`]; one holder at a time;
//! - **counted** (`Concurrency(max)` with a queue): every caller asks
//!   [`LockMode::Shared`] of [`RwLease::new`]`(max)`; at most `max` holders;
//! - **read-write**: readers ask shared, writers exclusive; any number of readers (up
//!   to `max_holders`) or one writer.
//!
//! **Tokens.** Every new lease, and every upgrade to a writer, takes the token
//! `max(last + 1, now)`, as the leases do: a writer's token is above every token granted
//! before it, readers' included, so a resource fences stale readers and writers alike.
//!
//! **Reentrancy.** An owner holds at most one lease per key. Asking again re-enters it
//! (holds + 1, expiry extended, token kept); a writer asking to read re-enters its write
//! lease. A reader asking to write is **upgraded only as the sole holder** (a new token);
//! with other readers it is refused and never queued, since two readers each waiting for
//! the other to leave would wait forever. [`RwLease::downgrade`] turns a writer into a
//! reader, keeping its token.
//!
//! **Waiting.** [`RwLease::acquire`] may queue a refused caller: it takes a numbered
//! place that expires `wait` ticks later unless the caller asks again before, so a dead
//! waiter drops out at its expiry. [`RwLease::try_acquire`] never queues. On a **fair**
//! lock ([`RwLease::fair`]) every refused caller queues and a lease goes only to the
//! head of the queue (a newcomer is refused while anyone waits). On an unfair lock only
//! writers queue, and only to keep **writer preference**: while a writer waits, new
//! readers are refused, so readers cannot starve writers; among writers the first to ask
//! after a release wins. (See `docs/design/lock-family.md` for how hosts carry it.)

use alloc::vec::Vec;

use crate::encoding::{self, Reader};
use crate::lease::{check_owner, check_ttl, Concurrency, Grant};
use crate::limits::{MAX_LEASES, MAX_OWNER_LEN, MAX_PERIOD};
// Named here too, beside the lock whose queue it bounds.
pub use crate::limits::MAX_WAITERS;
use crate::{Decision, DecodeError, ParamError, Ticks, MAX_TICKS};

mod plan;

/// What a caller asks for.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LockMode {
    /// A reader, or one of a counted lock's holders: shares the key with other shared
    /// holders.
    Shared,
    /// A writer: holds the key alone.
    Exclusive,
}

impl LockMode {
    const fn code(self) -> u64 {
        match self {
            Self::Shared => 0,
            Self::Exclusive => 1,
        }
    }

    const fn of_code(code: u64) -> Self {
        if code == 0 {
            Self::Shared
        } else {
            Self::Exclusive
        }
    }
}

/// A lock of the family: at most `max_holders` shared holders or one exclusive one,
/// fair or not. The parameters are not stored in the state: every host of a key must
/// use the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RwLease {
    max_holders: u64,
    fair: bool,
}

/// The state of a key: its holders, its queue, the last token and the last place given.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct RwState {
    last_token: u64,
    last_place: u64,
    /// Oldest grant first, so tokens ascend.
    holders: Vec<RwHolder>,
    /// First in line first, so places ascend.
    waiters: Vec<RwWaiter>,
}

/// One lease in an [`RwState`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RwHolder {
    owner: Vec<u8>,
    mode: LockMode,
    token: u64,
    expires_at: Ticks,
    holds: u64,
}

/// One place in an [`RwState`]'s queue.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RwWaiter {
    owner: Vec<u8>,
    mode: LockMode,
    place: u64,
    expires_at: Ticks,
}

impl RwHolder {
    /// Who holds it.
    pub fn owner(&self) -> &[u8] {
        &self.owner
    }

    /// Shared or exclusive.
    pub const fn mode(&self) -> LockMode {
        self.mode
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

    fn grant(&self) -> Grant {
        Grant::new(self.token, self.expires_at, self.holds)
    }
}

impl RwWaiter {
    /// Who waits.
    pub fn owner(&self) -> &[u8] {
        &self.owner
    }

    /// What it waits for.
    pub const fn mode(&self) -> LockMode {
        self.mode
    }

    /// Its number in the queue: places ascend in the order they were taken.
    pub const fn place(&self) -> u64 {
        self.place
    }

    /// The instant it drops out unless it asks again.
    pub const fn expires_at(&self) -> Ticks {
        self.expires_at
    }
}

impl RwState {
    /// The leases held at the last transition, oldest grant first.
    pub fn holders(&self) -> &[RwHolder] {
        &self.holders
    }

    /// The queue at the last transition, first in line first.
    pub fn waiters(&self) -> &[RwWaiter] {
        &self.waiters
    }

    /// The last fencing token granted on the key.
    pub const fn last_token(&self) -> u64 {
        self.last_token
    }

    /// `owner`'s lease if it is unexpired at `now`.
    pub fn held(&self, owner: &[u8], now: Ticks) -> Option<&RwHolder> {
        self.live_holder(owner, now.min(MAX_TICKS))
            .map(|i| &self.holders[i])
    }

    /// The waiter whose turn is next at `now`: the one a host wakes after a release or a
    /// grant (on an unfair lock, the writer readers give way to).
    pub fn next_turn(&self, now: Ticks) -> Option<&RwWaiter> {
        let now = now.min(MAX_TICKS);
        self.waiters.iter().find(|w| w.expires_at > now)
    }

    /// Whether the state is fresh at `now` (nothing held, nobody waiting, the clock past
    /// the last token), so a host may delete it.
    pub fn is_fresh(&self, now: Ticks) -> bool {
        self.fresh_after(now) == 0
    }

    /// The time from `now` until the state is fresh: the key's time to live.
    pub fn fresh_after(&self, now: Ticks) -> Ticks {
        self.fresh_at().saturating_sub(now.min(MAX_TICKS))
    }

    /// The instant the state is fresh: every lease and place expired, the clock past
    /// the last token.
    pub fn fresh_at(&self) -> Ticks {
        let held = self.holders.iter().map(|h| h.expires_at);
        let waiting = self.waiters.iter().map(|w| w.expires_at);
        let expiry = held.chain(waiting).max().unwrap_or(0);
        expiry.max(self.last_token.saturating_add(1))
    }

    /// Drops the leases released or expired at `now` and the places expired.
    fn reclaim(&mut self, now: Ticks) {
        self.holders.retain(|h| h.holds > 0 && h.expires_at > now);
        self.waiters.retain(|w| w.expires_at > now);
    }

    /// Where `owner`'s lease is, if it is unexpired at `now`.
    fn live_holder(&self, owner: &[u8], now: Ticks) -> Option<usize> {
        self.holders
            .iter()
            .position(|h| h.owner == owner && h.expires_at > now)
    }

    /// Where `owner`'s place is, if it is unexpired at `now`.
    fn live_waiter(&self, owner: &[u8], now: Ticks) -> Option<usize> {
        self.waiters
            .iter()
            .position(|w| w.owner == owner && w.expires_at > now)
    }

    fn next_token(&self, now: Ticks) -> Result<u64, LockError> {
        let next = self.last_token.checked_add(1);
        Ok(next.ok_or(LockError::TokensExhausted)?.max(now))
    }

    /// Applies `change` to `owner`'s lease unexpired at `now`, then reclaims the leases
    /// expired or left without holds: the lease as changed, or [`LockError::NotHeld`]
    /// with the state untouched.
    fn change_held(
        &mut self,
        now: Ticks,
        owner: &[u8],
        change: impl FnOnce(&mut RwHolder, Ticks),
    ) -> Result<Grant, LockError> {
        check_owner(owner)?;
        let now = now.min(MAX_TICKS);
        let i = self.live_holder(owner, now).ok_or(LockError::NotHeld)?;
        let holder = &mut self.holders[i];
        change(holder, now);
        let grant = holder.grant();
        self.reclaim(now);
        Ok(grant)
    }
}

/// A caller's place in a queue, as an acquire reports it.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Place {
    /// Its number: a host orders waiters (or names their keys) by it.
    pub number: u64,
    /// How many live waiters are ahead of it.
    pub ahead: u64,
    /// The instant it drops out unless its owner asks again.
    pub expires_at: Ticks,
}

impl Place {
    /// A place as a host read it back (a Redis script's reply).
    pub const fn new(number: u64, ahead: u64, expires_at: Ticks) -> Self {
        Self {
            number,
            ahead,
            expires_at,
        }
    }
}

/// The answer to [`RwLease::acquire`] and [`RwLease::try_acquire`].
#[must_use = "a denied acquire holds nothing"]
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RwAcquired {
    /// `limit` is `max_holders`; `remaining` the shared leases still free (0 while a
    /// writer holds); when denied, `retry_after` is the time until the request would be
    /// granted if nobody acted (the holders blocking it and the waiters ahead expired);
    /// `reset_after` the time until the state is fresh.
    pub decision: Decision,
    /// The lease, when granted.
    pub grant: Option<Grant>,
    /// The caller's place, when denied and queued.
    pub place: Option<Place>,
}

impl RwAcquired {
    /// An answer as a host read it back (a Redis script's reply).
    pub const fn new(decision: Decision, grant: Option<Grant>, place: Option<Place>) -> Self {
        Self {
            decision,
            grant,
            place,
        }
    }
}

/// A lock call that cannot be carried out.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LockError {
    /// A parameter (the owner's length, the ttl, the wait) is outside its range.
    #[error(transparent)]
    Param(#[from] ParamError),
    /// The owner holds no unexpired lease on the key.
    #[error("the owner holds no lease on this key (never acquired, released, or expired)")]
    NotHeld,
    /// The owner has no unexpired place in the key's queue.
    #[error("the owner has no place in this key's queue")]
    NotQueued,
    /// The owner re-entered its lease more times than a hold count can record.
    #[error("the owner holds this lease too many times")]
    TooManyHolds,
    /// Every fencing token has been granted (after 2^64 grants).
    #[error("no fencing token is left for this key")]
    TokensExhausted,
    /// The queue already holds [`MAX_WAITERS`] waiters.
    #[error("the queue of this key is full")]
    QueueFull,
    /// Every place number has been given (after 2^64 places without the key resting).
    #[error("no place number is left for this key")]
    PlacesExhausted,
}

type Next<T> = Result<(T, Option<RwState>), LockError>;

/// What an acquire asks for; `wait` is `None` for a try.
#[derive(Clone, Copy)]
struct Ask<'a> {
    owner: &'a [u8],
    mode: LockMode,
    ttl: Ticks,
    wait: Option<Ticks>,
}

/// A grant, or the instant the blocking holders and waiters are gone and the place.
type Answer = (Option<Grant>, Ticks, Option<Place>);

impl RwLease {
    /// At most `max_holders` (1..=1024) shared holders at once, unfair.
    pub fn new(max_holders: u64) -> Result<Self, ParamError> {
        let max_holders = ParamError::check("max_holders", max_holders, 1, MAX_LEASES)?;
        Ok(Self {
            max_holders,
            fair: false,
        })
    }

    /// The counted lock of `concurrency`: its `max` shared holders, unfair (callers
    /// asking exclusive hold it alone).
    pub const fn counted(concurrency: Concurrency) -> Self {
        Self {
            max_holders: concurrency.max(),
            fair: false,
        }
    }

    /// A read-write lock: up to 1024 readers or one writer, unfair.
    pub const fn read_write() -> Self {
        Self {
            max_holders: MAX_LEASES,
            fair: false,
        }
    }

    /// The same lock, granting in queue order.
    pub const fn fair(self) -> Self {
        Self { fair: true, ..self }
    }

    /// The most shared holders at once.
    pub const fn max_holders(&self) -> u64 {
        self.max_holders
    }

    /// Whether leases go in queue order.
    pub const fn is_fair(&self) -> bool {
        self.fair
    }

    /// Grants `owner` a lease in `mode` for `ttl` ticks if it may have one now (or
    /// re-enters, or upgrades, the one it holds); otherwise denies, and queues it (see
    /// the module's rules) in a place that expires `wait` ticks from `now` unless it
    /// asks again before.
    pub fn acquire(
        &self,
        state: Option<RwState>,
        now: Ticks,
        owner: &[u8],
        mode: LockMode,
        ttl: Ticks,
        wait: Ticks,
    ) -> Next<RwAcquired> {
        by_value(state, now, |s| {
            self.acquire_in(s, now, owner, mode, ttl, wait)
        })
    }

    /// [`acquire`](Self::acquire) that never queues: a place the owner already has is
    /// kept as it was, neither taken nor renewed.
    pub fn try_acquire(
        &self,
        state: Option<RwState>,
        now: Ticks,
        owner: &[u8],
        mode: LockMode,
        ttl: Ticks,
    ) -> Next<RwAcquired> {
        by_value(state, now, |s| {
            self.try_acquire_in(s, now, owner, mode, ttl)
        })
    }

    /// Releases `owner`'s lease once; it is freed when released as often as acquired.
    pub fn release(&self, state: Option<RwState>, now: Ticks, owner: &[u8]) -> Next<Grant> {
        by_value(state, now, |s| self.release_in(s, now, owner))
    }

    /// Extends `owner`'s unexpired lease to `now + ttl`; its token and mode stay.
    pub fn renew(
        &self,
        state: Option<RwState>,
        now: Ticks,
        owner: &[u8],
        ttl: Ticks,
    ) -> Next<Grant> {
        by_value(state, now, |s| self.renew_in(s, now, owner, ttl))
    }

    /// Turns `owner`'s lease into a shared one, keeping its token, holds and expiry
    /// (a shared lease stays as it is): readers may join it at once.
    pub fn downgrade(&self, state: Option<RwState>, now: Ticks, owner: &[u8]) -> Next<Grant> {
        by_value(state, now, |s| self.downgrade_in(s, now, owner))
    }

    /// Gives up `owner`'s place in the queue (a cancelled or timed-out wait).
    pub fn withdraw(
        &self,
        state: Option<RwState>,
        now: Ticks,
        owner: &[u8],
    ) -> Result<Option<RwState>, LockError> {
        by_value(state, now, |s| self.withdraw_in(s, now, owner)).map(|((), next)| next)
    }

    /// [`acquire`](Self::acquire) on a state held in place (an in-memory host's table):
    /// on an error the state is left exactly as it was, so the host need not copy it
    /// first. The state may be deleted when [`RwState::is_fresh`] at `now`.
    pub fn acquire_in(
        &self,
        state: &mut RwState,
        now: Ticks,
        owner: &[u8],
        mode: LockMode,
        ttl: Ticks,
        wait: Ticks,
    ) -> Result<RwAcquired, LockError> {
        ParamError::check("wait", wait, 1, MAX_PERIOD)?;
        self.ask_in(state, now, owner, mode, ttl, Some(wait))
    }

    /// [`try_acquire`](Self::try_acquire) on a state held in place; on an error the
    /// state is left exactly as it was.
    pub fn try_acquire_in(
        &self,
        state: &mut RwState,
        now: Ticks,
        owner: &[u8],
        mode: LockMode,
        ttl: Ticks,
    ) -> Result<RwAcquired, LockError> {
        self.ask_in(state, now, owner, mode, ttl, None)
    }

    /// [`release`](Self::release) on a state held in place; on an error the state is
    /// left exactly as it was.
    pub fn release_in(
        &self,
        state: &mut RwState,
        now: Ticks,
        owner: &[u8],
    ) -> Result<Grant, LockError> {
        state.change_held(now, owner, |holder, _| holder.holds -= 1)
    }

    /// [`renew`](Self::renew) on a state held in place; on an error the state is left
    /// exactly as it was.
    pub fn renew_in(
        &self,
        state: &mut RwState,
        now: Ticks,
        owner: &[u8],
        ttl: Ticks,
    ) -> Result<Grant, LockError> {
        check_ttl(ttl)?;
        state.change_held(now, owner, |holder, now| holder.expires_at = now + ttl)
    }

    /// [`downgrade`](Self::downgrade) on a state held in place; on an error the state
    /// is left exactly as it was.
    pub fn downgrade_in(
        &self,
        state: &mut RwState,
        now: Ticks,
        owner: &[u8],
    ) -> Result<Grant, LockError> {
        state.change_held(now, owner, |holder, _| holder.mode = LockMode::Shared)
    }

    /// [`withdraw`](Self::withdraw) on a state held in place; on an error the state is
    /// left exactly as it was.
    pub fn withdraw_in(
        &self,
        state: &mut RwState,
        now: Ticks,
        owner: &[u8],
    ) -> Result<(), LockError> {
        check_owner(owner)?;
        let now = now.min(MAX_TICKS);
        let i = state.live_waiter(owner, now).ok_or(LockError::NotQueued)?;
        state.waiters.remove(i);
        state.reclaim(now);
        Ok(())
    }

    fn ask_in(
        &self,
        state: &mut RwState,
        now: Ticks,
        owner: &[u8],
        mode: LockMode,
        ttl: Ticks,
        wait: Option<Ticks>,
    ) -> Result<RwAcquired, LockError> {
        check_owner(owner)?;
        check_ttl(ttl)?;
        let now = now.min(MAX_TICKS);
        let ask = Ask {
            owner,
            mode,
            ttl,
            wait,
        };
        // Every error is found before the state is touched.
        let plan = self.plan(state, now, &ask)?;
        let (grant, blocked_until, place) = state.commit(now, &ask, plan);
        let writer = state.holders.iter().any(|h| h.mode == LockMode::Exclusive);
        let remaining = if writer {
            0
        } else {
            self.max_holders - state.holders.len() as u64
        };
        let reset_after = state.fresh_after(now);
        let decision = match grant {
            Some(_) => Decision::admit(self.max_holders, remaining, reset_after, 0),
            None => {
                let retry = blocked_until.saturating_sub(now);
                Decision::deny(self.max_holders, remaining, Some(retry), reset_after)
            }
        };
        Ok(RwAcquired {
            decision,
            grant,
            place,
        })
    }

    /// Appends the canonical encoding of `state`: the last token and place and the
    /// numbers of holders and waiters, then per holder its token, expiry, hold count,
    /// mode (0 shared, 1 exclusive), owner length and owner, then per waiter its place,
    /// expiry, mode, owner length and owner.
    pub fn encode<E: Extend<u8>>(&self, state: &RwState, out: &mut E) {
        let counts = [state.holders.len() as u64, state.waiters.len() as u64];
        let head = [state.last_token, state.last_place, counts[0], counts[1]];
        encoding::write(out, encoding::tag::RW_LOCK, &head);
        for h in &state.holders {
            let fields = [h.token, h.expires_at, h.holds, h.mode.code()];
            write_entry(out, &fields, &h.owner);
        }
        for w in &state.waiters {
            write_entry(out, &[w.place, w.expires_at, w.mode.code()], &w.owner);
        }
    }

    /// The canonical encoding of `state` as a new vector.
    pub fn encode_to_vec(&self, state: &RwState) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode(state, &mut out);
        out
    }

    /// Reads a state written by [`encode`](Self::encode) for the same parameters. Bytes
    /// no valid state encodes (more holders than `max_holders` or waiters than
    /// [`MAX_WAITERS`], a writer beside another holder, tokens or places out of order,
    /// a reader queued on an unfair lock, an empty or repeated owner) are an error,
    /// never a panic; a state decoded encodes to the same bytes.
    pub fn decode(&self, bytes: &[u8]) -> Result<RwState, DecodeError> {
        let mut reader = Reader::new(bytes, encoding::tag::RW_LOCK)?;
        let last_token = reader.u64()?;
        let last_place = reader.u64()?;
        let held = reader.u64_where("holders", &|n| n <= self.max_holders)?;
        let queued = reader.u64_where("waiters", &|n| n <= MAX_WAITERS)?;
        // Both counts are at most 1024, so this reserves little whatever the bytes say.
        let mut state = RwState {
            last_token,
            last_place,
            holders: Vec::with_capacity(to_usize(held)),
            waiters: Vec::with_capacity(to_usize(queued)),
        };
        let mut owners: Vec<&[u8]> = Vec::with_capacity(to_usize(held + queued));
        for _ in 0..held {
            let after = state.holders.last().map_or(0, |h| h.token);
            let token = reader.u64_where("token", &|t| t > after && t <= last_token)?;
            let expires_at = read_expiry(&mut reader)?;
            let holds = reader.u64_where("holds", &|h| h >= 1)?;
            let mode = read_mode(&mut reader, true)?;
            let owner = read_owner(&mut reader, &mut owners)?;
            state.holders.push(RwHolder {
                owner: owner.to_vec(),
                mode,
                token,
                expires_at,
                holds,
            });
        }
        let writer = state.holders.iter().any(|h| h.mode == LockMode::Exclusive);
        if writer && held > 1 {
            return Err(DecodeError::InvalidField { field: "mode" });
        }
        for _ in 0..queued {
            let after = state.waiters.last().map_or(0, |w| w.place);
            let place = reader.u64_where("place", &|p| p > after && p <= last_place)?;
            let expires_at = read_expiry(&mut reader)?;
            let mode = read_mode(&mut reader, self.fair)?;
            let owner = read_owner(&mut reader, &mut owners)?;
            state.waiters.push(RwWaiter {
                owner: owner.to_vec(),
                mode,
                place,
                expires_at,
            });
        }
        reader.finish()?;
        Ok(state)
    }
}

/// One holder or waiter: its fields, then its owner's length and bytes.
fn write_entry<E: Extend<u8>>(out: &mut E, fields: &[u64], owner: &[u8]) {
    for field in fields.iter().chain([&(owner.len() as u64)]) {
        out.extend(field.to_be_bytes());
    }
    out.extend(owner.iter().copied());
}

fn read_expiry(reader: &mut Reader<'_>) -> Result<Ticks, DecodeError> {
    reader.u64_where("expires_at", &|t| t <= MAX_TICKS + MAX_PERIOD)
}

/// A mode; shared ones only where `shared` allows (an unfair lock queues writers only).
fn read_mode(reader: &mut Reader<'_>, shared: bool) -> Result<LockMode, DecodeError> {
    let lowest = if shared { 0 } else { 1 };
    let code = reader.u64_where("mode", &|m| (lowest..=1).contains(&m))?;
    Ok(LockMode::of_code(code))
}

/// An owner not seen before in the state.
fn read_owner<'a>(
    reader: &mut Reader<'a>,
    seen: &mut Vec<&'a [u8]>,
) -> Result<&'a [u8], DecodeError> {
    let len = reader.u64_where("owner_len", &|n| (1..=MAX_OWNER_LEN).contains(&n))?;
    let owner = reader.take(to_usize(len))?;
    if seen.contains(&owner) {
        return Err(DecodeError::InvalidField { field: "owner" });
    }
    seen.push(owner);
    Ok(owner)
}

/// A count already checked to be small.
fn to_usize(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

/// A transition in place on a state passed by value: `None` in is a fresh key, `None`
/// out a state fresh at `now` (nothing held or queued, the clock past the last token).
fn by_value<T>(
    state: Option<RwState>,
    now: Ticks,
    step: impl FnOnce(&mut RwState) -> Result<T, LockError>,
) -> Next<T> {
    let mut state = state.unwrap_or_default();
    let answer = step(&mut state)?;
    Ok((answer, (!state.is_fresh(now)).then_some(state)))
}
