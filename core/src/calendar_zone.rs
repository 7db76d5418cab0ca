//! The boundaries of calendar periods in IANA time zones: what every Rust host calls to
//! build the [`CalendarPeriod`] a [`CalendarWindow`](crate::CalendarWindow) decides in.

use std::string::String;

use jiff::civil::Date;
use jiff::tz::TimeZone;
use jiff::{Timestamp, ToSpan};

use crate::{CalendarPeriod, Ticks};

/// A calendar period: a day, an ISO week (from Monday) or a month, each from its first
/// midnight in the zone (or the first instant after it, where a zone skips midnight).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Calendar {
    /// A civil day: 23 or 25 hours on a daylight-saving change.
    Day,
    /// An ISO week: Monday to Sunday.
    Week,
    /// A month of the Gregorian calendar.
    Month,
}

/// An IANA time zone from the bundled database (its rules as of this build).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CalendarZone(TimeZone);

/// Why a calendar period could not be computed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CalendarError {
    /// The database has no zone of this name.
    #[error("unknown time zone {0:?}")]
    UnknownZone(String),
    /// The instant or a boundary of its period is outside the calendar's range (before
    /// the Unix epoch, or beyond year 9999).
    #[error("the calendar period at {0} µs is out of range")]
    OutOfRange(Ticks),
}

impl CalendarZone {
    /// Coordinated Universal Time.
    pub const UTC: Self = Self(TimeZone::UTC);

    /// The zone named `name` ("Europe/Berlin", "America/New_York", "UTC").
    pub fn named(name: &str) -> Result<Self, CalendarError> {
        TimeZone::get(name)
            .map(Self)
            .map_err(|_| CalendarError::UnknownZone(name.into()))
    }
}

impl Calendar {
    /// The period of this calendar in `zone` holding `now` (microseconds since the Unix
    /// epoch): its first instant and the next period's first instant.
    pub fn period_at(
        self,
        zone: &CalendarZone,
        now: Ticks,
    ) -> Result<CalendarPeriod, CalendarError> {
        let out_of_range = |_| CalendarError::OutOfRange(now);
        let micros = i64::try_from(now).map_err(|_| CalendarError::OutOfRange(now))?;
        let date = Timestamp::from_microsecond(micros)
            .map_err(out_of_range)?
            .to_zoned_datetime(zone.0.clone())
            .date();
        let (first, next) = match self {
            Self::Day => (date, date.tomorrow()),
            Self::Week => {
                let monday = date
                    .checked_sub(i64::from(date.weekday().to_monday_zero_offset()).days())
                    .map_err(out_of_range)?;
                (monday, monday.checked_add(1.week()))
            }
            Self::Month => {
                let first = date.first_of_month();
                (first, first.checked_add(1.month()))
            }
        };
        let start = start_of(first, zone, now)?;
        let end = start_of(next.map_err(out_of_range)?, zone, now)?;
        CalendarPeriod::new(start, end).map_err(|_| CalendarError::OutOfRange(now))
    }
}

/// The first instant of `date` in `zone`, in ticks.
fn start_of(date: Date, zone: &CalendarZone, now: Ticks) -> Result<Ticks, CalendarError> {
    let start = date
        .to_zoned_datetime(zone.0.clone())
        .and_then(|midnight| midnight.start_of_day())
        .map_err(|_| CalendarError::OutOfRange(now))?;
    u64::try_from(start.timestamp().as_microsecond()).map_err(|_| CalendarError::OutOfRange(now))
}
