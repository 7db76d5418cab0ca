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
/// use sluicegate_core::clock::{check_now, MAX_TICKS};
/// use sluicegate_core::ParamError;
///
/// assert_eq!(check_now(MAX_TICKS), Ok(MAX_TICKS));
/// assert!(matches!(check_now(u64::MAX), Err(ParamError::OutOfRange { name: "now", .. })));
/// ```
pub fn check_now(now: Ticks) -> Result<Ticks, crate::ParamError> {
    crate::ParamError::check("now", now, 0, MAX_TICKS)
}

/// `duration` in ticks (microseconds), saturating at `Ticks::MAX`: the one conversion
/// from a [`Duration`](core::time::Duration) every host and caller uses.
///
/// ```
/// use core::time::Duration;
/// use sluicegate_core::clock::ticks;
///
/// assert_eq!(ticks(Duration::from_millis(250)), 250_000);
/// assert_eq!(ticks(Duration::MAX), u64::MAX);
/// ```
pub fn ticks(duration: core::time::Duration) -> Ticks {
    Ticks::try_from(duration.as_micros()).unwrap_or(Ticks::MAX)
}

/// A source of the current time. Algorithms never read one; hosts do, at the edge.
pub trait Clock {
    /// The current time in ticks. Successive calls never go backwards.
    fn now(&self) -> Ticks;

    /// The current time for a host that orders readings itself (an in-memory bucket
    /// raises it to the latest instant its state was decided at): it may be a little
    /// behind a reading another thread has already taken. The default is
    /// [`now`](Self::now); [`MonotonicClock`] skips its process-wide floor.
    #[inline]
    fn now_unordered(&self) -> Ticks {
        self.now()
    }
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
    #[inline]
    fn now(&self) -> Ticks {
        self.0.load(core::sync::atomic::Ordering::SeqCst)
    }
}

/// Microseconds since the Unix epoch from the operating system's wall clock, so that
/// states move between hosts (Redis `TIME`, the browser's `Date.now()`) unchanged.
#[cfg(feature = "clock")]
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

#[cfg(feature = "clock")]
impl Clock for SystemClock {
    fn now(&self) -> Ticks {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, ticks)
    }
}

/// Microseconds since the Unix epoch that never go backwards: the wall clock read once,
/// then advanced by the CPU's counter. Every `MonotonicClock` in a process shares the
/// same anchor, so they agree with each other; states stay portable between hosts.
///
/// The counter is read through quanta: the time stamp counter on x86-64 with an
/// invariant TSC and the system counter on AArch64 (calibrated once against the OS
/// clock, which takes 10 to 200 ms at the first reading), else the OS's monotonic
/// clock. A reading costs a third to a half of an `Instant::now()` (the `clock`
/// benchmark group).
///
/// Never backwards, also across threads: the counters of two cores may differ by a few
/// cycles, and an unfenced read may happen a little early, so every reading is raised to
/// the latest one returned in the process (a floor read from one shared word, written at
/// most once per microsecond by whichever thread first sees that microsecond). A reading
/// that happens after another (through a lock, an atomic, a limiter's state) is never
/// below it. The in-memory buckets skip that shared word: they read the clock
/// [unordered](Clock::now_unordered) and raise the reading to the latest instant their
/// own state was decided at, kept beside it in the same cache line
/// (the in-process limiters' narrow cells).
///
/// Like the OS's monotonic clock, it does not count the time the machine is suspended
/// (a limit does not refill during a suspend), and the wall clock being stepped later
/// (NTP) does not move it. A counter that went backwards (a CPU hot-plugged with an
/// unsynchronised counter) holds the clock still until the counter catches up: decisions
/// are then stricter, never looser.
#[cfg(feature = "clock")]
#[derive(Debug, Clone, Copy)]
pub struct MonotonicClock {
    /// The process's anchor, held so that a reading does not check it is taken.
    anchor: &'static Anchor,
}

#[cfg(feature = "clock")]
impl MonotonicClock {
    /// The process's clock, anchored now. The first anchoring in a process calibrates the
    /// CPU's counter against the OS clock (10 to 200 ms, the longer under load), so the
    /// in-memory limiters' and leases' constructors call this: no decision pays it.
    pub fn new() -> Self {
        static ANCHOR: std::sync::OnceLock<Anchor> = std::sync::OnceLock::new();
        let anchor = ANCHOR.get_or_init(|| {
            let clock = quanta::Clock::new();
            let raw = clock.raw();
            let epoch = SystemClock.now().min(MAX_TICKS);
            Anchor {
                scale: scale(|ticks| clock.delta_as_nanos(0, ticks)),
                clock,
                raw,
                epoch,
                headroom: MAX_TICKS - epoch,
            }
        });
        Self { anchor }
    }
}

#[cfg(feature = "clock")]
impl Default for MonotonicClock {
    fn default() -> Self {
        Self::new()
    }
}

/// Where a [`MonotonicClock`] counts from.
#[cfg(feature = "clock")]
#[derive(Debug)]
struct Anchor {
    clock: quanta::Clock,
    /// The counter's raw reading at the anchor.
    raw: u64,
    /// The epoch microseconds at the anchor.
    epoch: Ticks,
    /// `MAX_TICKS - epoch`: the microseconds after the anchor that the range holds, so
    /// that a reading's range check is one comparison.
    headroom: Ticks,
    /// Microseconds per counter tick times 2^64, if below one (a counter of 1 MHz or
    /// more): a reading is then one multiplication away from microseconds, where quanta's
    /// nanoseconds and a division by 1000 take two and a wide shift.
    scale: Option<u64>,
}

#[cfg(feature = "clock")]
impl Anchor {
    /// Microseconds in `ticks` of the counter.
    #[inline]
    fn micros(&self, ticks: u64) -> Ticks {
        match self.scale {
            Some(scale) => {
                u64::try_from((u128::from(ticks) * u128::from(scale)) >> 64).unwrap_or(Ticks::MAX)
            }
            None => self.slow_micros(ticks),
        }
    }

    /// [`micros`](Self::micros) for a counter slower than 1 MHz: out of line, so that
    /// the one multiplication of the usual counters is the straight path.
    #[cold]
    #[inline(never)]
    fn slow_micros(&self, ticks: u64) -> Ticks {
        self.clock.delta_as_nanos(0, ticks) / 1_000
    }
}

/// Microseconds per counter tick times 2^64, from `nanos` (the nanoseconds in so many
/// ticks): measured over 2^52 ticks, so exact to 2^-52 ns per tick (a quarter of a
/// microsecond after 2^60 ticks, 12 years at 3 GHz). `None` for a counter slower than
/// 1 MHz, whose scale does not fit.
#[cfg(feature = "clock")]
fn scale(nanos: impl Fn(u64) -> u64) -> Option<u64> {
    const SPAN_BITS: u32 = 52;
    let nanos = u128::from(nanos(1 << SPAN_BITS));
    u64::try_from((nanos << (64 - SPAN_BITS)) / 1_000).ok()
}

#[cfg(feature = "clock")]
impl Clock for MonotonicClock {
    #[inline]
    fn now(&self) -> Ticks {
        /// The latest reading returned in the process, alone on its cache lines: it is
        /// written once a microsecond, and every reading reads the anchor beside it.
        #[repr(align(128))]
        struct Floor(core::sync::atomic::AtomicU64);
        static FLOOR: Floor = Floor(core::sync::atomic::AtomicU64::new(0));
        raise(&FLOOR.0, self.now_unordered())
    }

    #[inline]
    fn now_unordered(&self) -> Ticks {
        let anchor = self.anchor;
        let micros = anchor.micros(anchor.clock.raw().saturating_sub(anchor.raw));
        // A branch rather than a select: a limiter's compare-and-swap waits for every
        // select between the counter and it.
        if micros <= anchor.headroom {
            anchor.epoch + micros
        } else {
            beyond_the_range()
        }
    }
}

/// [`MAX_TICKS`] as the reading, for one past it (146 000 years after the anchor): out
/// of line, so that the clock's range check stays a branch.
#[cfg(feature = "clock")]
#[cold]
#[inline(never)]
fn beyond_the_range() -> Ticks {
    MAX_TICKS
}

/// `reading`, or the latest value returned before if that is later; `floor` keeps it.
#[cfg(feature = "clock")]
#[inline]
pub(crate) fn raise(floor: &core::sync::atomic::AtomicU64, reading: Ticks) -> Ticks {
    use core::sync::atomic::Ordering::Relaxed;
    // Relaxed suffices: a reading that happens after another is ordered after it, so it
    // sees the floor that one left or a later value (read-read coherence). Only a
    // reading past the floor writes, and not once another thread has raised the floor to
    // it (as `fetch_max` would), so threads that see a new microsecond together write it
    // once and share the word read-mostly.
    let seen = floor.load(Relaxed);
    if reading > seen {
        raise_past(floor, seen, reading)
    } else {
        seen
    }
}

/// [`raise`] where `reading` is past the floor last `seen`: once a microsecond, so out
/// of line, leaving the check's straight path a load and a branch.
#[cfg(feature = "clock")]
#[cold]
#[inline(never)]
fn raise_past(floor: &core::sync::atomic::AtomicU64, mut seen: Ticks, reading: Ticks) -> Ticks {
    use core::sync::atomic::Ordering::Relaxed;
    while reading > seen {
        match floor.compare_exchange_weak(seen, reading, Relaxed, Relaxed) {
            Ok(_) => return reading,
            Err(actual) => seen = actual,
        }
    }
    seen
}

#[cfg(all(test, feature = "clock"))]
mod tests {
    use super::*;
    use core::sync::atomic::AtomicU64;

    /// The one-multiplication conversion against quanta's nanoseconds divided by 1000,
    /// for a 3 GHz counter, a 1 MHz one and nanosecond ticks (quanta's fallback).
    #[test]
    fn the_scale_converts_as_quanta() {
        for (factor, shift) in [(1_431_655_765u64, 32u32), (1_000_000_000, 20), (1, 0)] {
            let nanos = |ticks: u64| {
                u64::try_from((u128::from(ticks) * u128::from(factor)) >> shift).unwrap_or(0)
            };
            let anchor_scale = scale(nanos).expect("at least 1 MHz");
            for ticks in [
                0u64,
                1,
                999,
                1_000,
                3_000_000_123,
                1 << 40,
                1 << 52,
                1 << 60,
            ] {
                let ours = (u128::from(ticks) * u128::from(anchor_scale)) >> 64;
                let theirs = ((u128::from(ticks) * u128::from(factor)) >> shift) / 1_000;
                // Within one microsecond, plus 2^-52 ns per tick of measured scale.
                assert!(
                    ours.abs_diff(theirs) <= 1 + (u128::from(ticks) >> 52),
                    "{ticks}"
                );
            }
        }
        // A counter slower than 1 MHz keeps quanta's conversion.
        assert_eq!(scale(|ticks| ticks.saturating_mul(2_000)), None);
    }

    #[test]
    fn a_reading_behind_the_floor_is_raised() {
        let floor = AtomicU64::new(0);
        assert_eq!(raise(&floor, 10), 10);
        // A core whose counter lags, or a read issued early: held at the floor.
        assert_eq!(raise(&floor, 9), 10);
        assert_eq!(raise(&floor, 11), 11);
        assert_eq!(floor.load(core::sync::atomic::Ordering::Relaxed), 11);
    }
}
