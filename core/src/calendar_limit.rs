//! A calendar window that finds its own period: the form a policy, the dynamic
//! algorithm and every host name, where the period comes from the clock at each decision.

use alloc::string::String;
use alloc::sync::Arc;

use crate::{
    Algorithm, CalendarPeriod, CalendarWindow, CalendarWindowState, Decision, DecodeError, Report,
    Ticks, MAX_TICKS,
};

/// A calendar: the period holding any instant (a day, an ISO week or a month in a time
/// zone, see `ZonedCalendar` under the `calendar` feature).
///
/// A trait in the `no_std` core, not the `calendar` feature's type itself, so the dynamic
/// algorithm keeps one variant on every build while the time-zone database stays a
/// host's choice (and a test's: a fixed schedule of periods needs no database).
pub trait CalendarPeriods: core::fmt::Debug + Send + Sync {
    /// The period holding `now` (at most [`MAX_TICKS`]). A calendar that ends before
    /// `MAX_TICKS` returns its last period beyond its range (the window then decides as
    /// at that period's last instant).
    fn period_at(&self, now: Ticks) -> CalendarPeriod;

    /// What the periods are ("month in Europe/Berlin"): two calendars of one name cut
    /// time the same way, which is how limits holding them compare.
    fn name(&self) -> String;
}

/// A [`CalendarWindow`] with its calendar: each transition at `now` runs
/// [`CalendarWindow::during`] the period holding `now`.
///
/// The calendar is shared (`Arc`), so cloning a limit (a policy's, a host's) does not
/// copy a time zone's rules.
#[derive(Debug, Clone)]
pub struct CalendarLimit {
    window: CalendarWindow,
    periods: Arc<dyn CalendarPeriods>,
}

impl CalendarLimit {
    /// `window` in the periods of `periods`.
    pub fn new(window: CalendarWindow, periods: Arc<dyn CalendarPeriods>) -> Self {
        Self { window, periods }
    }

    /// The window's parameters.
    pub const fn window(&self) -> CalendarWindow {
        self.window
    }

    /// Its calendar.
    pub fn periods(&self) -> &dyn CalendarPeriods {
        &*self.periods
    }

    /// The window in the period holding `now`.
    fn at(&self, now: Ticks) -> crate::CalendarWindowAt {
        self.window
            .during(self.periods.period_at(now.min(MAX_TICKS)))
    }
}

/// The same window in a calendar of the same name.
impl PartialEq for CalendarLimit {
    fn eq(&self, other: &Self) -> bool {
        self.window == other.window && self.periods.name() == other.periods.name()
    }
}

impl Eq for CalendarLimit {}

impl Algorithm for CalendarLimit {
    type State = CalendarWindowState;

    fn decide(
        &self,
        state: Option<CalendarWindowState>,
        now: Ticks,
        cost: u64,
    ) -> (Decision, Option<CalendarWindowState>) {
        self.at(now).decide(state, now, cost)
    }

    fn encode<E: Extend<u8>>(&self, state: &CalendarWindowState, out: &mut E) {
        self.window.encode_state(state, out);
    }

    fn decode(&self, bytes: &[u8]) -> Result<CalendarWindowState, DecodeError> {
        self.window.decode_state(bytes)
    }
}

impl Report for CalendarLimit {
    fn overdraft(&self) -> u64 {
        self.window.overdraft()
    }

    fn adjust(
        &self,
        state: Option<CalendarWindowState>,
        now: Ticks,
        adjustment: i64,
    ) -> (u64, Option<CalendarWindowState>) {
        self.at(now).adjust(state, now, adjustment)
    }
}
