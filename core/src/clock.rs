//! Time as an integer tick count, and the clocks that produce it.

/// An instant or a duration in ticks. The canonical tick is the microsecond; instants
/// count from the Unix epoch (or from any origin all users of a key agree on).
pub type Ticks = u64;

/// Ticks in one millisecond.
pub const MILLISECOND: Ticks = 1_000;
/// Ticks in one second.
pub const SECOND: Ticks = 1_000_000;
/// The latest instant the algorithms are defined for (2^62 ticks, about 146 000 years).
/// Every decision at a `now` up to it is exact. A later `now` is decided as at
/// `MAX_TICKS`; hosts that take an explicit time refuse it with [`check_now`].
pub const MAX_TICKS: Ticks = 1 << 62;

/// `now` if it is at most [`MAX_TICKS`], else
/// [`ParamError::OutOfRange`](crate::ParamError::OutOfRange) named `"now"`: the one check
/// every host applies to a time given by its caller, so that a time beyond the range is
/// an error rather than a decision at `MAX_TICKS`.
///
/// ```
/// use tollgate_core::{check_now, ParamError, MAX_TICKS};
///
/// assert_eq!(check_now(MAX_TICKS), Ok(MAX_TICKS));
/// assert!(matches!(check_now(u64::MAX), Err(ParamError::OutOfRange { name: "now", .. })));
/// ```
pub fn check_now(now: Ticks) -> Result<Ticks, crate::ParamError> {
    crate::ParamError::check("now", now, 0, MAX_TICKS)
}

/// A source of the current time. Algorithms never read one; hosts do, at the edge.
pub trait Clock {
    /// The current time in ticks. Successive calls never go backwards.
    fn now(&self) -> Ticks;
}

/// A clock that moves only when told to: for tests and simulation.
#[cfg(target_has_atomic = "64")]
#[derive(Debug, Default)]
pub struct ManualClock(core::sync::atomic::AtomicU64);

#[cfg(target_has_atomic = "64")]
impl ManualClock {
    /// A clock showing `now`.
    pub const fn new(now: Ticks) -> Self {
        Self(core::sync::atomic::AtomicU64::new(now))
    }

    /// Moves the clock forward by `by` ticks (saturating at [`MAX_TICKS`]).
    pub fn advance(&self, by: Ticks) {
        let order = core::sync::atomic::Ordering::SeqCst;
        // The closure always returns Some, so the update cannot fail.
        let _ = self
            .0
            .fetch_update(order, order, |t| Some(t.saturating_add(by).min(MAX_TICKS)));
    }

    /// Sets the clock to `now`; a time earlier than the current one is ignored.
    pub fn set(&self, now: Ticks) {
        self.0.fetch_max(now, core::sync::atomic::Ordering::SeqCst);
    }
}

#[cfg(target_has_atomic = "64")]
impl Clock for ManualClock {
    fn now(&self) -> Ticks {
        self.0.load(core::sync::atomic::Ordering::SeqCst)
    }
}

/// Microseconds since the Unix epoch from the operating system's wall clock, so that
/// states move between hosts (Redis `TIME`, the browser's `Date.now()`) unchanged.
#[cfg(feature = "std")]
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

#[cfg(feature = "std")]
impl Clock for SystemClock {
    fn now(&self) -> Ticks {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(MAX_TICKS))
    }
}

/// Microseconds since the Unix epoch that never go backwards: the wall clock read once,
/// then advanced by the monotonic clock. Every `MonotonicClock` in a process shares the
/// same anchor, so they agree with each other; states stay portable between hosts.
///
/// Costs one `Instant::now()` per reading (see the `clock` benchmark group); the wall
/// clock being stepped later (NTP) does not move it.
#[cfg(feature = "std")]
#[derive(Debug, Default, Clone, Copy)]
pub struct MonotonicClock;

#[cfg(feature = "std")]
impl Clock for MonotonicClock {
    fn now(&self) -> Ticks {
        static ANCHOR: std::sync::OnceLock<(std::time::Instant, Ticks)> =
            std::sync::OnceLock::new();
        let (instant, epoch) =
            ANCHOR.get_or_init(|| (std::time::Instant::now(), SystemClock.now()));
        let elapsed = instant.elapsed();
        // Seconds and microseconds separately: cheaper than a 128-bit `as_micros`.
        epoch
            .saturating_add(elapsed.as_secs().saturating_mul(SECOND))
            .saturating_add(u64::from(elapsed.subsec_micros()))
            .min(MAX_TICKS)
    }
}
