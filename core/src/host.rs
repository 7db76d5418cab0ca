//! The contract every host of the algorithms keeps (in memory, Redis, sled, a remote
//! service): a [`Request`] whose parts are named, the [`Limiter`] operations on it, the
//! same for leases ([`LeaseRequest`], [`LeaseHost`]), and the one [`FailPolicy`] for a
//! store that cannot be reached.

#[cfg(feature = "alloc")]
use crate::lease::{Acquired, Grant, LeaseState};
use crate::{Decision, Reported, Ticks};

pub use crate::key::KeyDisplay;

/// One request to a limiter: a key, a cost and optionally the time to decide at.
///
/// Built by name, never by position, so a cost and a time cannot be swapped:
///
/// ```
/// use sluicegate_core::host::Request;
///
/// let plain = Request::new("alice");
/// assert_eq!((plain.key, plain.cost, plain.now), (&b"alice"[..], 1, None));
/// let explicit = Request::new(b"alice").cost(5).at(1_000);
/// assert_eq!((explicit.cost, explicit.now), (5, Some(1_000)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Request<'k> {
    /// The key whose limit is decided.
    pub key: &'k [u8],
    /// The units the request takes (1 unless set with [`cost`](Self::cost)).
    pub cost: u64,
    /// The time to decide at; `None` (unless set with [`at`](Self::at)) for the host's
    /// clock.
    pub now: Option<Ticks>,
}

impl<'k> Request<'k> {
    /// A request of cost 1 for `key`, decided at the host's time.
    pub fn new<K: AsRef<[u8]> + ?Sized>(key: &'k K) -> Self {
        Self {
            key: key.as_ref(),
            cost: 1,
            now: None,
        }
    }

    /// The same request taking `cost` units.
    #[must_use]
    pub const fn cost(mut self, cost: u64) -> Self {
        self.cost = cost;
        self
    }

    /// The same request decided at `now` rather than at the host's time (tests, replays,
    /// and callers whose clock is the reference).
    #[must_use]
    pub const fn at(mut self, now: Ticks) -> Self {
        self.now = Some(now);
        self
    }
}

/// A cost reported for a key after its decision: the actual cost minus what was decided
/// (negative: units given back), optionally at a given time.
///
/// Built by name, like [`Request`], so an adjustment and a time cannot be swapped:
///
/// ```
/// use sluicegate_core::host::ReportRequest;
///
/// // 700 tokens were used where 500 were estimated.
/// let extra = ReportRequest::new("alice").adjust(700 - 500).at(1_000);
/// assert_eq!((extra.key, extra.adjustment, extra.now), (&b"alice"[..], 200, Some(1_000)));
/// // A cancelled request of cost 3 gives its units back.
/// assert_eq!(ReportRequest::new("alice").adjust(-3).now, None);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct ReportRequest<'k> {
    /// The key charged or refunded.
    pub key: &'k [u8],
    /// Units added to what the key has taken (negative: given back); 0 unless set with
    /// [`adjust`](Self::adjust).
    pub adjustment: i64,
    /// The time to report at; `None` for the host's clock.
    pub now: Option<Ticks>,
}

impl<'k> ReportRequest<'k> {
    /// A report of no units for `key`, at the host's time.
    pub fn new<K: AsRef<[u8]> + ?Sized>(key: &'k K) -> Self {
        Self {
            key: key.as_ref(),
            adjustment: 0,
            now: None,
        }
    }

    /// The same report adding `adjustment` units (negative: giving them back).
    #[must_use]
    pub const fn adjust(mut self, adjustment: i64) -> Self {
        self.adjustment = adjustment;
        self
    }

    /// The same report made at `now` rather than at the host's time.
    #[must_use]
    pub const fn at(mut self, now: Ticks) -> Self {
        self.now = Some(now);
        self
    }
}

/// The report operation of hosts whose algorithm takes costs after the decision (see
/// [`Report`](crate::Report)): a trait beside [`Limiter`] rather than a method of it, so
/// that each host gains it when its store runs the transition, and a request id to count
/// a retried report once belongs to the caller that has one (the service), not to
/// every host.
pub trait Reporter {
    /// Why a host could not report (its store unreachable, a corrupt state, a time out
    /// of range).
    type Error;

    /// Applies `request` to its key's state and stores it: what was recorded and
    /// dropped, and the key's standing after it.
    fn report(&self, request: &ReportRequest<'_>) -> Result<Reported, Self::Error>;
}

/// [`Reporter`] for hosts whose store answers asynchronously.
pub trait AsyncReporter {
    /// Why a host could not report.
    type Error;

    /// Applies `request` to its key's state and stores it (see [`Reporter::report`]).
    fn report(
        &self,
        request: &ReportRequest<'_>,
    ) -> impl core::future::Future<Output = Result<Reported, Self::Error>> + Send;
}

/// The operations every host offers on a keyed limit.
pub trait Limiter {
    /// Why a host could not decide (its store unreachable, a corrupt state, a time out of
    /// range).
    type Error;

    /// Decides `request` and stores the key's new state.
    fn check(&self, request: &Request<'_>) -> Result<Decision, Self::Error>;

    /// What `request` would get, changing nothing.
    fn peek(&self, request: &Request<'_>) -> Result<Decision, Self::Error>;

    /// Forgets `key`: its next request finds it fresh.
    fn reset(&self, key: &[u8]) -> Result<(), Self::Error>;

    /// Books a slot for `request` if it can act within `max_wait` ticks; the decision's
    /// `delay` says how long to wait before acting. An algorithm that cannot book ahead
    /// (a window, a ban; see [`AnyAlgorithm::can_reserve`](crate::AnyAlgorithm::can_reserve))
    /// decides at the request's time instead.
    fn reserve(&self, request: &Request<'_>, max_wait: Ticks) -> Result<Decision, Self::Error>;
}

/// The [`Limiter`] operations for hosts whose store answers asynchronously (Redis
/// through tokio): the same contract, each operation a future that can move between
/// threads.
pub trait AsyncLimiter {
    /// Why a host could not decide.
    type Error;

    /// Decides `request` and stores the key's new state.
    fn check(
        &self,
        request: &Request<'_>,
    ) -> impl core::future::Future<Output = Result<Decision, Self::Error>> + Send;

    /// What `request` would get, changing nothing.
    fn peek(
        &self,
        request: &Request<'_>,
    ) -> impl core::future::Future<Output = Result<Decision, Self::Error>> + Send;

    /// Forgets `key`: its next request finds it fresh.
    fn reset(
        &self,
        key: &[u8],
    ) -> impl core::future::Future<Output = Result<(), Self::Error>> + Send;

    /// Books a slot for `request` if it can act within `max_wait` ticks (see
    /// [`Limiter::reserve`]).
    fn reserve(
        &self,
        request: &Request<'_>,
        max_wait: Ticks,
    ) -> impl core::future::Future<Output = Result<Decision, Self::Error>> + Send;
}

/// One lease operation: a key, the owner acting on it, the lease's time to live and
/// optionally the time to act at.
///
/// Built by name, like [`Request`], so neither the key and the owner nor the ttl and the
/// time can be swapped. An owner or a ttl left unset is refused by every host with the
/// same [`LeaseError::Param`](crate::LeaseError::Param) (a release needs no ttl):
///
/// ```
/// use sluicegate_core::host::LeaseRequest;
/// use sluicegate_core::SECOND;
///
/// let lease = LeaseRequest::new("db-migration").owner("node-a").ttl(30 * SECOND);
/// assert_eq!((lease.key, lease.owner), (&b"db-migration"[..], &b"node-a"[..]));
/// assert_eq!((lease.ttl, lease.now), (30 * SECOND, None));
/// assert_eq!(lease.at(5).now, Some(5));
/// ```
#[cfg(feature = "alloc")]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct LeaseRequest<'a> {
    /// The key whose leases are counted.
    pub key: &'a [u8],
    /// Who holds, renews or releases the lease (1 to 128 bytes).
    pub owner: &'a [u8],
    /// How long an acquired or renewed lease lives, in ticks (unused by a release).
    pub ttl: Ticks,
    /// The time to act at; `None` for the host's clock.
    pub now: Option<Ticks>,
}

#[cfg(feature = "alloc")]
impl<'a> LeaseRequest<'a> {
    /// A request on `key`, its owner and ttl still to set, at the host's time.
    pub fn new<K: AsRef<[u8]> + ?Sized>(key: &'a K) -> Self {
        Self {
            key: key.as_ref(),
            owner: &[],
            ttl: 0,
            now: None,
        }
    }

    /// The same request made by `owner`.
    #[must_use]
    pub fn owner<O: AsRef<[u8]> + ?Sized>(mut self, owner: &'a O) -> Self {
        self.owner = owner.as_ref();
        self
    }

    /// The same request for a lease living `ttl` ticks.
    #[must_use]
    pub const fn ttl(mut self, ttl: Ticks) -> Self {
        self.ttl = ttl;
        self
    }

    /// The same request made at `now` rather than at the host's time.
    #[must_use]
    pub const fn at(mut self, now: Ticks) -> Self {
        self.now = Some(now);
        self
    }
}

/// The lease operations every host offers on keyed leases (counting semaphores and
/// locks with fencing tokens): the same contract as [`Limiter`], for leases.
#[cfg(feature = "alloc")]
pub trait LeaseHost {
    /// Why a host could not act (its store unreachable, a parameter out of range, a
    /// release by an owner holding nothing).
    type Error;

    /// Grants the owner a lease if fewer than the maximum are held (or re-enters its
    /// own); a denial is a value, with `retry_after`.
    fn acquire(&self, request: &LeaseRequest<'_>) -> Result<Acquired, Self::Error>;

    /// Gives back one hold of the owner's lease: the lease as it stands (`holds` 0 when
    /// freed).
    fn release(&self, request: &LeaseRequest<'_>) -> Result<Grant, Self::Error>;

    /// Extends the owner's unexpired lease to the request's ttl from now, its token kept.
    fn renew(&self, request: &LeaseRequest<'_>) -> Result<Grant, Self::Error>;

    /// The key's lease table as stored, `None` when fresh.
    fn state(&self, key: &[u8]) -> Result<Option<LeaseState>, Self::Error>;
}

/// The [`LeaseHost`] operations for hosts whose store answers asynchronously.
#[cfg(feature = "alloc")]
pub trait AsyncLeaseHost {
    /// Why a host could not act.
    type Error;

    /// Grants the owner a lease (see [`LeaseHost::acquire`]).
    fn acquire(
        &self,
        request: &LeaseRequest<'_>,
    ) -> impl core::future::Future<Output = Result<Acquired, Self::Error>> + Send;

    /// Gives back one hold of the owner's lease (see [`LeaseHost::release`]).
    fn release(
        &self,
        request: &LeaseRequest<'_>,
    ) -> impl core::future::Future<Output = Result<Grant, Self::Error>> + Send;

    /// Extends the owner's unexpired lease (see [`LeaseHost::renew`]).
    fn renew(
        &self,
        request: &LeaseRequest<'_>,
    ) -> impl core::future::Future<Output = Result<Grant, Self::Error>> + Send;

    /// The key's lease table as stored, `None` when fresh.
    fn state(
        &self,
        key: &[u8],
    ) -> impl core::future::Future<Output = Result<Option<LeaseState>, Self::Error>> + Send;
}

/// What a host answers while its store (Redis, a remote service) cannot be reached.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum FailPolicy<L> {
    /// Report the error: a service answers 503 and the caller decides. The default:
    /// nothing is silently admitted or denied.
    #[default]
    Error,
    /// Admit, with no figures: keep serving at the cost of the limit.
    Open,
    /// Deny: protect what is behind the limit at the cost of its callers.
    Closed,
    /// Decide with a limiter in this process: each replica enforces the limit alone, so
    /// a fleet of `n` admits up to `n` times the limit meanwhile.
    Local(L),
}

/// A host's answer under a [`FailPolicy`], saying where it came from. Exhaustive, so
/// callers can match on it whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome<E> {
    /// The store decided.
    Decided(Decision),
    /// The store was unreachable (the error); the local limiter decided.
    Local(Decision, E),
    /// The store was unreachable; admitted by [`FailPolicy::Open`], with no figures.
    Open(E),
    /// The store was unreachable; denied by [`FailPolicy::Closed`].
    Closed(E),
}

impl<E> Outcome<E> {
    /// Whether the request may proceed.
    pub const fn allowed(&self) -> bool {
        match self {
            Self::Decided(d) | Self::Local(d, _) => d.allowed,
            Self::Open(_) => true,
            Self::Closed(_) => false,
        }
    }

    /// The decision with its figures, where one was made (not when failing open or
    /// closed: no budget is known then).
    pub const fn decision(&self) -> Option<&Decision> {
        match self {
            Self::Decided(d) | Self::Local(d, _) => Some(d),
            Self::Open(_) | Self::Closed(_) => None,
        }
    }

    /// Why the store did not decide, if it did not.
    pub const fn error(&self) -> Option<&E> {
        match self {
            Self::Decided(_) => None,
            Self::Local(_, e) | Self::Open(e) | Self::Closed(e) => Some(e),
        }
    }
}

impl<L> FailPolicy<L> {
    /// What callers get for the store's `result`: its decision, or, where `unreachable`
    /// says the error means the store could not be reached, the policy's answer (the
    /// local limiter deciding through `local`). Any other error, and an unreachable store
    /// under [`FailPolicy::Error`], is returned as the error.
    ///
    /// ```
    /// use sluicegate_core::host::{FailPolicy, Outcome};
    /// use sluicegate_core::Decision;
    ///
    /// let unreachable: Result<Decision, &str> = Err("connection refused");
    /// let open = FailPolicy::<()>::Open.apply(unreachable, |_| true, |_| unreachable!());
    /// assert_eq!(open, Ok(Outcome::Open("connection refused")));
    /// let error = FailPolicy::<()>::Error.apply(unreachable, |_| true, |_| unreachable!());
    /// assert_eq!(error, Err("connection refused"));
    /// ```
    pub fn apply<E>(
        &self,
        result: Result<Decision, E>,
        unreachable: impl FnOnce(&E) -> bool,
        local: impl FnOnce(&L) -> Decision,
    ) -> Result<Outcome<E>, E> {
        match result {
            Ok(decision) => Ok(Outcome::Decided(decision)),
            Err(error) if unreachable(&error) => match self {
                Self::Error => Err(error),
                Self::Open => Ok(Outcome::Open(error)),
                Self::Closed => Ok(Outcome::Closed(error)),
                Self::Local(limiter) => Ok(Outcome::Local(local(limiter), error)),
            },
            Err(error) => Err(error),
        }
    }
}
