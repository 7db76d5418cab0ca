#![doc = include_str!("../README.md")]
#![no_std]
#![deny(missing_docs)]
// docs.rs marks what each feature adds.
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "alloc")]
extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

mod algorithm;
#[cfg(feature = "alloc")]
mod any;
mod ban;
mod bucket;
mod calendar;
#[cfg(feature = "alloc")]
mod calendar_limit;
#[cfg(feature = "calendar")]
mod calendar_zone;
mod clock;
#[cfg(feature = "alloc")]
mod composite;
mod decision;
mod encoding;
mod error;
mod fixed_window;
mod host;
mod key;
mod kind;
#[cfg(feature = "alloc")]
mod lease;
#[cfg(feature = "memory")]
pub mod memory;
mod report;
mod sliding_counter;
#[cfg(feature = "alloc")]
mod sliding_log;

pub use algorithm::{Algorithm, Refund, Reserve};
#[cfg(feature = "alloc")]
pub use any::{AnyAlgorithm, AnyState, Transition};
pub use ban::{Ban, BanState};
pub use bucket::{BucketParams, BucketState, LeakyBucket, Pacing, TokenBucket};
pub use calendar::{
    CalendarPeriod, CalendarWindow, CalendarWindowAt, CalendarWindowState, PeriodOf,
};
#[cfg(feature = "alloc")]
pub use calendar_limit::{CalendarLimit, CalendarPeriods, SharedCalendar};
#[cfg(feature = "calendar")]
pub use calendar_zone::{Calendar, CalendarError, CalendarZone, ZonedCalendar};
#[cfg(target_has_atomic = "64")]
pub use clock::ManualClock;
pub use clock::{check_now, ticks, Clock, Ticks, MAX_TICKS, MILLISECOND, SECOND};
#[cfg(feature = "clock")]
pub use clock::{MonotonicClock, SystemClock};
#[cfg(feature = "alloc")]
pub use composite::Composite;
pub use decision::Decision;
pub use error::{DecodeError, ParamError};
pub use fixed_window::{FixedWindow, FixedWindowState, WindowParams};
#[cfg(feature = "alloc")]
pub use host::{AsyncLeaseHost, LeaseHost, LeaseRequest};
pub use host::{
    AsyncLimiter, AsyncReporter, FailPolicy, Limiter, Outcome, ReportRequest, Reporter, Request,
};
pub use key::KeyDisplay;
pub use kind::Kind;
#[cfg(feature = "alloc")]
pub use lease::{Acquired, Concurrency, Grant, Lease, LeaseError, LeaseState};
pub use report::{Report, Reported};
pub use sliding_counter::{SlidingCounter, SlidingCounterState};
#[cfg(feature = "alloc")]
pub use sliding_log::{SlidingLog, SlidingLogState};

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
    /// The longest owner of a lease, in bytes (a UUID and a thread id fit).
    pub const MAX_OWNER_LEN: u64 = 128;
    /// The longest time a bucket may take to refill from empty, `capacity × period / rate`:
    /// 2^53 ticks (about 285 years), so every instant a bucket stores is exact in a double.
    pub const MAX_HORIZON: Ticks = 1 << 53;
    /// The longest wait a reservation books (2^53 ticks, about 285 years): a larger
    /// `max_wait` is taken as this one.
    pub const MAX_WAIT: Ticks = 1 << 53;
}
