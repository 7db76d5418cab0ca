//! The boundaries of calendar periods in IANA time zones: what every Rust host calls to
//! build the [`CalendarPeriod`] a [`CalendarWindow`](crate::CalendarWindow) decides in.

use std::format;
use std::string::String;

use jiff::civil::Date;
use jiff::tz::TimeZone;
use jiff::{Timestamp, ToSpan};

use crate::{CalendarPeriod, CalendarPeriods, Ticks};

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
    /// The instant or the end of its period is beyond the calendar's range (year 9999).
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

    /// Its IANA name ("Europe/Berlin"; [`UTC`](Self::UTC) is "UTC").
    pub fn name(&self) -> &str {
        self.0.iana_name().unwrap_or("UTC")
    }
}

impl Calendar {
    /// Every calendar, in the order help texts list them.
    pub const ALL: [Self; 3] = [Self::Day, Self::Week, Self::Month];

    /// Its name in policies and the JS API: `day`, `week` or `month`.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Day => "day",
            Self::Week => "week",
            Self::Month => "month",
        }
    }

    /// The longest its period lasts, a daylight-saving change included (a day of 25
    /// hours; a week, and a month of 31 days, holding one): what a host keeps a state for.
    pub const fn longest(self) -> Ticks {
        const HOUR: Ticks = 3_600 * crate::SECOND;
        match self {
            Self::Day => 25 * HOUR,
            Self::Week => (7 * 24 + 1) * HOUR,
            Self::Month => (31 * 24 + 1) * HOUR,
        }
    }

    /// The calendar `name` spells (see [`name`](Self::name)).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|calendar| calendar.name() == name)
    }
}

/// 9999-11-01T00:00Z: every calendar's period holding it ends within the database's
/// range (to the end of 9999) in every zone.
const LAST: Ticks = 253_397_030_400_000_000;

/// A [`Calendar`] in a [`CalendarZone`]: the [`CalendarPeriods`] a calendar window of a
/// policy decides in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZonedCalendar {
    calendar: Calendar,
    zone: CalendarZone,
    /// The period holding [`LAST`]: what instants beyond the calendar's range get, which
    /// does not hold them, so that a window refuses them.
    last: CalendarPeriod,
}

impl ZonedCalendar {
    /// `calendar`'s periods in `zone`.
    pub fn new(calendar: Calendar, zone: CalendarZone) -> Result<Self, CalendarError> {
        let last = calendar.period_at(&zone, LAST)?;
        Ok(Self {
            calendar,
            zone,
            last,
        })
    }

    /// The calendar.
    pub const fn calendar(&self) -> Calendar {
        self.calendar
    }

    /// The zone.
    pub const fn zone(&self) -> &CalendarZone {
        &self.zone
    }
}

/// Instants beyond the database's range (after 9999) get the period holding 9999-11-01,
/// which a window refuses to decide them in.
impl CalendarPeriods for ZonedCalendar {
    fn period_at(&self, now: Ticks) -> CalendarPeriod {
        self.calendar
            .period_at(&self.zone, now)
            .unwrap_or(self.last)
    }

    fn name(&self) -> String {
        format!("{} in {}", self.calendar.name(), self.zone.name())
    }
}

impl Calendar {
    /// The period of this calendar in `zone` holding `now` (microseconds since the Unix
    /// epoch): its first instant and the next period's first instant. A period starts at
    /// the first instant of its first civil date, so where clocks go back across midnight
    /// an instant still dated the day before belongs to the day that has begun. The
    /// period holding the epoch, where it starts before 1970, starts at tick 0.
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
        let mut first = match self {
            Self::Day => date,
            Self::Week => date
                .checked_sub(i64::from(date.weekday().to_monday_zero_offset()).days())
                .map_err(out_of_range)?,
            Self::Month => date.first_of_month(),
        };
        loop {
            let next = match self {
                Self::Day => first.tomorrow(),
                Self::Week => first.checked_add(1.week()),
                Self::Month => first.checked_add(1.month()),
            }
            .map_err(out_of_range)?;
            let end = start_of(next, zone, now)?;
            if micros < end {
                let start = start_of(first, zone, now)?;
                let start = u64::try_from(start).unwrap_or(0);
                let end = u64::try_from(end).map_err(|_| CalendarError::OutOfRange(now))?;
                return CalendarPeriod::new(start, end).map_err(|_| CalendarError::OutOfRange(now));
            }
            first = next;
        }
    }
}

/// The first instant of `date` in `zone`, in microseconds since the epoch (negative
/// before 1970).
fn start_of(date: Date, zone: &CalendarZone, now: Ticks) -> Result<i64, CalendarError> {
    date.to_zoned_datetime(zone.0.clone())
        .and_then(|midnight| midnight.start_of_day())
        .map(|start| start.timestamp().as_microsecond())
        .map_err(|_| CalendarError::OutOfRange(now))
}
