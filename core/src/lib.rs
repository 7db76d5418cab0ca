#![doc = include_str!("../README.md")]
#![no_std]
#![deny(missing_docs)]
#![warn(unreachable_pub)]
// docs.rs marks what each feature adds.
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "alloc")]
extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

mod algorithm;
mod anchored_window;
#[cfg(feature = "alloc")]
mod any;
mod ban;
mod bucket;
#[cfg(feature = "alloc")]
mod build;
// The file keeps its name; the public `calendar` module below gathers its items with
// the calendars'.
#[cfg(feature = "alloc")]
mod calendar_limit;
#[path = "calendar.rs"]
mod calendar_window;
#[cfg(feature = "calendar")]
mod calendar_zone;
#[cfg(feature = "alloc")]
mod carry;
pub mod clock;
#[cfg(feature = "alloc")]
mod composite;
mod decision;
mod encoding;
mod error;
mod fixed_window;
mod fleet;
pub mod host;
mod key;
mod kind;
#[cfg(feature = "alloc")]
pub mod lease;
#[cfg(feature = "memory")]
pub mod memory;
mod report;
#[cfg(feature = "alloc")]
pub mod rwlock;
pub mod share;
mod sliding_counter;
#[cfg(feature = "alloc")]
mod sliding_log;

// What a user needs first: the algorithms, the dynamic one built from a kind, what they
// answer and what they fail with.
pub use algorithm::{Algorithm, Refund, Reserve};
pub use anchored_window::{decide_all, AnchoredWindow};
#[cfg(feature = "alloc")]
pub use any::{AnyAlgorithm, Transition};
pub use ban::Ban;
pub use bucket::{LeakyBucket, Pacing, TokenBucket};
#[cfg(feature = "alloc")]
pub use build::Params;
pub use clock::{Ticks, MILLISECOND, SECOND};
#[cfg(feature = "alloc")]
pub use composite::Composite;
pub use decision::Decision;
pub use error::{DecodeError, ParamError};
pub use fixed_window::FixedWindow;
pub use fleet::FleetMode;
pub use kind::{Field, Kind};
pub use report::{Report, Reported};
pub use sliding_counter::SlidingCounter;
#[cfg(feature = "alloc")]
pub use sliding_log::SlidingLog;

/// The state each algorithm keeps per key, as hosts store it (in its canonical encoding,
/// [`Algorithm::encode`]).
pub mod state {
    pub use crate::anchored_window::AnchoredWindowState;
    #[cfg(feature = "alloc")]
    pub use crate::any::AnyState;
    pub use crate::ban::BanState;
    pub use crate::bucket::BucketState;
    pub use crate::calendar_window::CalendarWindowState;
    pub use crate::fixed_window::FixedWindowState;
    pub use crate::sliding_counter::SlidingCounterState;
    #[cfg(feature = "alloc")]
    pub use crate::sliding_log::SlidingLogState;
}

/// The validated parameters an algorithm holds, as its `params()` returns them.
pub mod params {
    pub use crate::bucket::BucketParams;
    pub use crate::fixed_window::WindowParams;
}

/// Calendar windows: a limit per day, ISO week or month. The core takes each period
/// explicitly ([`CalendarWindow::during`]) or from a [`CalendarPeriods`]
/// ([`CalendarLimit`]); the `calendar` feature computes them in an IANA time zone
/// (`ZonedCalendar`).
pub mod calendar {
    #[cfg(feature = "alloc")]
    pub use crate::calendar_limit::{CalendarLimit, CalendarPeriods, SharedCalendar};
    pub use crate::calendar_window::{CalendarPeriod, CalendarWindow, CalendarWindowAt, PeriodOf};
    #[cfg(feature = "calendar")]
    pub use crate::calendar_zone::{Calendar, CalendarError, CalendarZone, ZonedCalendar};
}

// The paths of earlier releases, kept while callers move to the modules above.
#[doc(hidden)]
#[cfg(feature = "calendar")]
pub use calendar::{Calendar, CalendarError, CalendarZone, ZonedCalendar};
#[doc(hidden)]
#[cfg(feature = "alloc")]
pub use calendar::{CalendarLimit, CalendarPeriods, SharedCalendar};
#[doc(hidden)]
pub use calendar::{CalendarPeriod, CalendarWindow, CalendarWindowAt, PeriodOf};
#[doc(hidden)]
#[cfg(target_has_atomic = "64")]
pub use clock::ManualClock;
#[doc(hidden)]
pub use clock::{check_now, ticks, Clock, MAX_TICKS};
#[doc(hidden)]
#[cfg(feature = "clock")]
pub use clock::{MonotonicClock, SystemClock};
#[doc(hidden)]
#[cfg(feature = "alloc")]
pub use host::{AsyncLeaseHost, LeaseHost, LeaseRequest};
#[doc(hidden)]
pub use host::{
    AsyncLimiter, AsyncReporter, FailPolicy, KeyDisplay, Limiter, Outcome, ReportRequest, Reporter,
    Request,
};
#[doc(hidden)]
#[cfg(feature = "alloc")]
pub use lease::{Acquired, Concurrency, Grant, Lease, LeaseError, LeaseState};
#[doc(hidden)]
pub use params::{BucketParams, WindowParams};
#[doc(hidden)]
#[cfg(feature = "alloc")]
pub use state::{AnyState, SlidingLogState};
#[doc(hidden)]
pub use state::{
    BanState, BucketState, CalendarWindowState, FixedWindowState, SlidingCounterState,
};

/// Limits on parameters, shared by every algorithm.
pub mod limits {
    use crate::Ticks;

    /// The largest limit, capacity or rate any algorithm accepts.
    pub const MAX_LIMIT: u64 = 1_000_000_000;
    /// The largest period or duration: 366 days.
    pub const MAX_PERIOD: Ticks = 366 * 24 * 3600 * crate::SECOND;
    /// The largest limit of a [`SlidingLog`](crate::SlidingLog), whose memory grows with it.
    pub const MAX_LOG_LIMIT: u64 = 100_000;
    /// The most leases a [`Concurrency`](crate::Concurrency) limit holds per key: its
    /// state (and the work to check it) grows with them.
    pub const MAX_LEASES: u64 = 1024;
    /// The most waiters a read-write lock's queue holds per key: its state (and each
    /// transition's work) grows with them.
    pub const MAX_WAITERS: u64 = 1024;
    /// The longest owner of a lease, in bytes (a UUID and a thread id fit).
    pub const MAX_OWNER_LEN: u64 = 128;
    /// The longest time a bucket may take to refill from empty, `capacity × period / rate`:
    /// 2^53 ticks (about 285 years), so every instant a bucket stores is exact in a double.
    pub const MAX_HORIZON: Ticks = 1 << 53;
    /// The longest wait a reservation books (2^53 ticks, about 285 years): a larger
    /// `max_wait` is taken as this one.
    pub const MAX_WAIT: Ticks = 1 << 53;
}
