//! A calendar window that finds its own period: the form a policy, the dynamic
//! algorithm and every host name, where the period comes from the clock at each decision.

use alloc::string::String;
use alloc::sync::Arc;

use crate::{CalendarPeriod, CalendarWindow, CalendarWindowAt, ParamError, PeriodOf, Ticks};

/// A calendar: the period holding any instant (a day, an ISO week or a month in a time
/// zone, see `ZonedCalendar` under the `calendar` feature).
///
/// A trait in the `no_std` core, not the `calendar` feature's type itself, so the dynamic
/// algorithm keeps one variant on every build while the time-zone database stays a
/// host's choice (and a test's: a fixed schedule of periods needs no database).
pub trait CalendarPeriods: core::fmt::Debug + Send + Sync {
    /// The period holding `now` (at most [`MAX_TICKS`](crate::MAX_TICKS)). A calendar
    /// that ends before `MAX_TICKS` returns, beyond its range, a period not holding `now`
    /// (its last): a window refuses to decide or report there, rather than count in it.
    fn period_at(&self, now: Ticks) -> CalendarPeriod;

    /// What the periods are ("month in Europe/Berlin"): two calendars of one name cut
    /// time the same way, which is how limits holding them compare.
    fn name(&self) -> String;
}

/// A calendar shared by every clone of a limit (a policy's, a host's), so cloning does
/// not copy a time zone's rules; equal when the names are.
#[derive(Debug, Clone)]
pub struct SharedCalendar(Arc<dyn CalendarPeriods>);

impl PartialEq for SharedCalendar {
    fn eq(&self, other: &Self) -> bool {
        self.0.name() == other.0.name()
    }
}

impl Eq for SharedCalendar {}

/// The calendar's period holding `now`; a period that does not hold it (a calendar past
/// its range, or one that is wrong) is refused, never counted in.
impl PeriodOf for SharedCalendar {
    fn period_of(&self, now: Ticks) -> Result<CalendarPeriod, ParamError> {
        self.0.period_at(now).holding(now)
    }
}

/// A [`CalendarWindow`] with its calendar: each transition at `now` runs in the period
/// holding `now`, exactly as [`CalendarWindow::during`] that period.
pub type CalendarLimit = CalendarWindowAt<SharedCalendar>;

impl CalendarLimit {
    /// `window` in the periods of `periods`.
    pub fn new(window: CalendarWindow, periods: Arc<dyn CalendarPeriods>) -> Self {
        window.within(SharedCalendar(periods))
    }

    /// Its calendar.
    pub fn calendar(&self) -> &dyn CalendarPeriods {
        &*self.periods().0
    }

    /// The period of its calendar holding `now`, or
    /// [`ParamError::OutOfRange`] named `"now"` where the calendar has none (beyond its
    /// range): the check a host applies to a time it is given, as
    /// [`check_now`](crate::check_now), before deciding or computing a period for a store.
    pub fn period_at(&self, now: Ticks) -> Result<CalendarPeriod, ParamError> {
        self.periods().period_of(now)
    }
}
