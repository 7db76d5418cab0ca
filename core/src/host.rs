//! The contract every host of the algorithms keeps (in memory, Redis, sled, a remote
//! service): a [`Request`] whose parts are named, the [`Limiter`] operations on it, and
//! the one [`FailPolicy`] for a store that cannot be reached.

use crate::{Decision, Ticks};

/// One request to a limiter: a key, a cost and optionally the time to decide at.
///
/// Built by name, never by position, so a cost and a time cannot be swapped:
///
/// ```
/// use tollgate_core::Request;
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
    /// use tollgate_core::{Decision, FailPolicy, Outcome};
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
