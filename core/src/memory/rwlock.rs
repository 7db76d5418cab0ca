//! The lock family of [`crate::rwlock`] in process: shared and exclusive leases, fair
//! or not, whose blocked callers each sleep on their own turn and are woken one at a
//! time, when the core says theirs is next and grantable.

use core::fmt;
use core::ops::ControlFlow;
use core::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};
use std::vec::Vec;

use super::turn::{Turn, WaitCancel};
use crate::limits::MAX_PERIOD;
use crate::rwlock::{LockError, LockMode, RwAcquired, RwLease, RwState};
use crate::{ticks, Clock, Decision, Grant, MonotonicClock, Ticks, MAX_TICKS};

/// One [`RwLease`] lock for the whole process: readers and writers, a counted lock, or
/// an exclusive one, fair or not, each holder a guard with a fencing token.
///
/// ```
/// use std::time::Duration;
/// use sluicegate_core::memory::RwLeases;
/// use sluicegate_core::rwlock::{LockMode, RwLease};
/// use sluicegate_core::SECOND;
///
/// let lock = RwLeases::new(RwLease::read_write().fair());
/// let reader = lock.try_acquire(b"reader", LockMode::Shared, 30 * SECOND)?;
/// // A writer waits up to 50 ms for the reader to leave; nobody else is woken.
/// let writer = lock.acquire(b"writer", LockMode::Exclusive, 30 * SECOND, Duration::from_millis(50), None);
/// assert!(writer.is_err());
/// drop(reader);
/// let writer = lock.try_acquire(b"writer", LockMode::Exclusive, 30 * SECOND)?;
/// assert!(writer.token() > 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// A release, downgrade, withdrawal or grant wakes at most one blocked caller: the
/// state's [`next_turn`](RwState::next_turn) if the core would grant it now (on an
/// unfair lock with nobody queued, the longest-blocked reader the core did not queue).
/// A holder's expiry wakes nobody: the caller at the head sleeps until that instant.
pub struct RwLeases<C = MonotonicClock> {
    lock: RwLease,
    clock: C,
    inner: Mutex<Inner>,
    wakes: AtomicU64,
}

struct Inner {
    state: Option<RwState>,
    /// Callers blocked in `acquire`, oldest first: queued ones, and the readers an
    /// unfair lock refuses without queuing.
    blocked: Vec<Blocked>,
}

struct Blocked {
    owner: Vec<u8>,
    mode: LockMode,
    turn: Arc<Turn>,
}

/// Why a lock was not granted.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RwAcquireError {
    /// The lock was not free for the caller (by the deadline, when waiting);
    /// `retry_after` is the core's.
    #[error("the lock is held or others wait ahead")]
    Busy(Decision),
    /// The wait's [`WaitCancel`] was cancelled; the caller's place is given up.
    #[error("the wait was cancelled")]
    Cancelled,
    /// A parameter is out of range, or the key's tokens, holds or queue ran out.
    #[error(transparent)]
    Lock(#[from] LockError),
}

impl RwLeases {
    /// The lock on the process's [`MonotonicClock`].
    pub fn new(lock: RwLease) -> Self {
        Self::with_clock(lock, MonotonicClock::new())
    }
}

impl<C: Clock> RwLeases<C> {
    /// The lock with expiries read on `clock` (a [`ManualClock`](crate::ManualClock) in
    /// tests).
    pub fn with_clock(lock: RwLease, clock: C) -> Self {
        Self {
            lock,
            clock,
            inner: Mutex::new(Inner {
                state: None,
                blocked: Vec::new(),
            }),
            wakes: AtomicU64::new(0),
        }
    }

    /// A lease in `mode` for `ttl` ticks now, or [`RwAcquireError::Busy`]; never queues.
    /// An `owner` (1 to 128 bytes) holding the lock re-enters it.
    pub fn try_acquire(
        &self,
        owner: &[u8],
        mode: LockMode,
        ttl: Ticks,
    ) -> Result<RwGuard<'_, C>, RwAcquireError> {
        let mut inner = self.inner();
        let now = self.now();
        let acquired = self.apply(&mut inner, now, |lock, state| {
            lock.try_acquire_in(state, now, owner, mode, ttl)
        })?;
        self.granted(&inner, now, owner, mode, acquired)
    }

    /// A lease in `mode` for `ttl` ticks, waiting up to `timeout` in the queue (and,
    /// with `cancel`, until it is cancelled). Blocks the thread, which sleeps until its
    /// turn comes, a blocking holder expires, or the deadline; a wait that ends without
    /// a grant gives up its place.
    pub fn acquire(
        &self,
        owner: &[u8],
        mode: LockMode,
        ttl: Ticks,
        timeout: Duration,
        cancel: Option<&WaitCancel>,
    ) -> Result<RwGuard<'_, C>, RwAcquireError> {
        let (deadline, turn) = (Instant::now().checked_add(timeout), turn_of(cancel));
        let mut blocked = Registered::new(self, owner);
        loop {
            match self.ask_blocking(&mut blocked, &turn, mode, ttl, deadline) {
                ControlFlow::Break(answer) => return answer,
                ControlFlow::Continue(pause) => turn.sleep(pause),
            }
        }
    }

    /// [`acquire`](Self::acquire) as a future: the task sleeps until its turn comes, a
    /// blocking holder expires, the deadline or `cancel`. Dropping the future gives up
    /// its place and holds nothing.
    #[cfg(feature = "tokio")]
    pub async fn acquire_async(
        &self,
        owner: &[u8],
        mode: LockMode,
        ttl: Ticks,
        timeout: Duration,
        cancel: Option<&WaitCancel>,
    ) -> Result<RwGuard<'_, C>, RwAcquireError> {
        let (deadline, turn) = (Instant::now().checked_add(timeout), turn_of(cancel));
        let mut blocked = Registered::new(self, owner);
        loop {
            match self.ask_blocking(&mut blocked, &turn, mode, ttl, deadline) {
                ControlFlow::Break(answer) => return answer,
                ControlFlow::Continue(pause) => turn.sleep_async(pause).await,
            }
        }
    }

    /// One ask of a blocking acquire: its answer, or how long to sleep before the next
    /// (registered as blocked meanwhile, so that a release may wake it).
    fn ask_blocking<'h>(
        &'h self,
        blocked: &mut Registered<'h, '_, C>,
        turn: &Arc<Turn>,
        mode: LockMode,
        ttl: Ticks,
        deadline: Option<Instant>,
    ) -> ControlFlow<Result<RwGuard<'h, C>, RwAcquireError>, Duration> {
        if turn.is_cancelled() {
            return ControlFlow::Break(Err(RwAcquireError::Cancelled));
        }
        let owner = blocked.owner;
        let left = deadline.map_or(Duration::MAX, |at| {
            at.saturating_duration_since(Instant::now())
        });
        let mut inner = self.inner();
        let now = self.now();
        // The place lasts as long as the wait: only a cancelled or ended wait leaves it.
        let wait = ticks(left).clamp(1, MAX_PERIOD);
        let acquired = self.apply(&mut inner, now, |lock, state| {
            if left.is_zero() {
                lock.try_acquire_in(state, now, owner, mode, ttl)
            } else {
                lock.acquire_in(state, now, owner, mode, ttl, wait)
            }
        });
        let acquired = match acquired {
            Ok(acquired) => acquired,
            Err(error) => return ControlFlow::Break(Err(error.into())),
        };
        if acquired.grant.is_some() || left.is_zero() {
            blocked.leave(&mut inner);
            return ControlFlow::Break(self.granted(&inner, now, owner, mode, acquired));
        }
        if blocked.turn.is_none() {
            inner.blocked.push(Blocked {
                owner: owner.to_vec(),
                mode,
                turn: Arc::clone(turn),
            });
            blocked.turn = Some(Arc::clone(turn));
        }
        drop(inner);
        let retry = acquired.decision.retry_after.unwrap_or(wait).min(wait);
        ControlFlow::Continue(left.min(Duration::from_micros(retry)))
    }

    /// The state now (holders and queue), `None` when fresh.
    pub fn state(&self) -> Option<RwState> {
        let now = self.now();
        self.inner()
            .state
            .clone()
            .filter(|state| !state.is_fresh(now))
    }

    /// How many callers are blocked in [`acquire`](Self::acquire) now, queued or not.
    pub fn blocked(&self) -> usize {
        self.inner().blocked.len()
    }

    /// How many blocked callers releases, grants and withdrawals have woken: one per
    /// turn handed on, however many wait.
    pub fn wakes(&self) -> u64 {
        self.wakes.load(Ordering::Relaxed)
    }

    /// The lock's parameters.
    pub const fn lease(&self) -> &RwLease {
        &self.lock
    }

    /// The clock expiries are read on.
    pub const fn clock(&self) -> &C {
        &self.clock
    }

    fn now(&self) -> Ticks {
        self.clock.now().min(MAX_TICKS)
    }

    fn inner(&self) -> MutexGuard<'_, Inner> {
        // Transitions do not panic, but a poisoned lock must not make every later call one.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs a transition on the state in place at `now`; a refused one leaves it as it
    /// was.
    fn apply<T>(
        &self,
        inner: &mut Inner,
        now: Ticks,
        step: impl FnOnce(&RwLease, &mut RwState) -> Result<T, LockError>,
    ) -> Result<T, LockError> {
        let stored = inner.state.is_some();
        let state = inner.state.get_or_insert_with(RwState::default);
        let answer = step(&self.lock, state);
        // Kept as by value: deleted once fresh (its places then numbered from one again).
        let fresh = answer.is_ok() && state.is_fresh(now);
        if fresh || answer.is_err() && !stored {
            inner.state = None;
        }
        answer
    }

    /// The guard of a granted acquire (waking whoever the grant lets in), or the denial.
    fn granted(
        &self,
        inner: &Inner,
        now: Ticks,
        owner: &[u8],
        mode: LockMode,
        acquired: RwAcquired,
    ) -> Result<RwGuard<'_, C>, RwAcquireError> {
        let grant = acquired
            .grant
            .ok_or(RwAcquireError::Busy(acquired.decision))?;
        self.wake_next(inner, now);
        // A writer asking to read re-enters its write lease.
        let held = inner.state.as_ref().and_then(|s| s.held(owner, now));
        Ok(RwGuard {
            host: self,
            owner: owner.to_vec(),
            mode: held.map_or(mode, |h| h.mode()),
            grant,
            held: true,
        })
    }

    /// Wakes the one blocked caller whose turn is next, if the core would grant it now.
    fn wake_next(&self, inner: &Inner, now: Ticks) {
        let state = inner.state.as_ref();
        let candidate = match state.and_then(|s| s.next_turn(now)) {
            Some(next) => inner.blocked.iter().find(|b| b.owner == next.owner()),
            None => inner.blocked.first(),
        };
        let Some(candidate) = candidate else {
            return;
        };
        let (owner, mode) = (&candidate.owner, candidate.mode);
        let fresh = RwState::default();
        if self.lock.grants(state.unwrap_or(&fresh), now, owner, mode) && candidate.turn.wake() {
            self.wakes.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A guard's change to its lease, then the wake it may allow.
    fn change(
        &self,
        step: impl FnOnce(&RwLease, &mut RwState, Ticks) -> Result<Grant, LockError>,
    ) -> Result<Grant, LockError> {
        let mut inner = self.inner();
        let now = self.now();
        let grant = self.apply(&mut inner, now, |lock, state| step(lock, state, now))?;
        self.wake_next(&inner, now);
        Ok(grant)
    }
}

/// The turn a wait sleeps on: `cancel`'s, so that cancelling wakes it.
fn turn_of(cancel: Option<&WaitCancel>) -> Arc<Turn> {
    cancel.map_or_else(Arc::default, WaitCancel::turn)
}

/// A blocked caller's entry, removed (and its place given up) however its wait ends.
struct Registered<'h, 'o, C: Clock> {
    host: &'h RwLeases<C>,
    owner: &'o [u8],
    turn: Option<Arc<Turn>>,
}

impl<'h, 'o, C: Clock> Registered<'h, 'o, C> {
    const fn new(host: &'h RwLeases<C>, owner: &'o [u8]) -> Self {
        Self {
            host,
            owner,
            turn: None,
        }
    }

    fn leave(&mut self, inner: &mut Inner) {
        let Some(turn) = self.turn.take() else {
            return;
        };
        inner.blocked.retain(|b| !Arc::ptr_eq(&b.turn, &turn));
        let now = self.host.now();
        let owner = self.owner;
        // A grant has already taken the place (`NotQueued`); otherwise it is given up here.
        let _ = self.host.apply(inner, now, |lock, state| {
            lock.withdraw_in(state, now, owner)
        });
        self.host.wake_next(inner, now);
    }
}

impl<C: Clock> Drop for Registered<'_, '_, C> {
    fn drop(&mut self) {
        if self.turn.is_some() {
            let host = self.host;
            self.leave(&mut host.inner());
        }
    }
}

/// A lease held in an [`RwLeases`]: released when dropped (or by
/// [`release`](Self::release)).
#[must_use = "dropping the guard releases the lease at once"]
pub struct RwGuard<'a, C: Clock = MonotonicClock> {
    host: &'a RwLeases<C>,
    owner: Vec<u8>,
    mode: LockMode,
    grant: Grant,
    held: bool,
}

impl<C: Clock> RwGuard<'_, C> {
    /// The fencing token to pass with every read and write of the protected resource.
    pub const fn token(&self) -> u64 {
        self.grant.token
    }

    /// The lease as granted or last renewed.
    pub const fn grant(&self) -> Grant {
        self.grant
    }

    /// Shared or exclusive.
    pub const fn mode(&self) -> LockMode {
        self.mode
    }

    /// The owner it was acquired for.
    pub fn owner(&self) -> &[u8] {
        &self.owner
    }

    /// Extends the lease to `ttl` ticks from now; its token stays.
    pub fn renew(&mut self, ttl: Ticks) -> Result<Grant, LockError> {
        let owner = self.owner.clone();
        self.grant = self
            .host
            .change(|lock, state, now| lock.renew_in(state, now, &owner, ttl))?;
        Ok(self.grant)
    }

    /// Turns a writer's lease into a reader's, keeping its token: readers waiting may
    /// join it at once.
    pub fn downgrade(&mut self) -> Result<Grant, LockError> {
        let owner = self.owner.clone();
        self.grant = self
            .host
            .change(|lock, state, now| lock.downgrade_in(state, now, &owner))?;
        self.mode = LockMode::Shared;
        Ok(self.grant)
    }

    /// Releases the lease (one hold of it, when re-entered); [`LockError::NotHeld`] if
    /// it had expired.
    pub fn release(mut self) -> Result<Grant, LockError> {
        self.held = false;
        self.release_once()
    }

    fn release_once(&self) -> Result<Grant, LockError> {
        let owner = &self.owner;
        self.host
            .change(|lock, state, now| lock.release_in(state, now, owner))
    }
}

impl<C: Clock> Drop for RwGuard<'_, C> {
    fn drop(&mut self) {
        if self.held {
            // An expired lease has nothing to give back.
            let _ = self.release_once();
        }
    }
}

impl<C: Clock> fmt::Debug for RwGuard<'_, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RwGuard")
            .field("mode", &self.mode)
            .field("grant", &self.grant)
            .finish_non_exhaustive()
    }
}

impl<C> fmt::Debug for RwLeases<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RwLeases")
            .field("lock", &self.lock)
            .finish_non_exhaustive()
    }
}
