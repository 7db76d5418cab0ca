//! Calendar windows: a fixed window whose boundaries the host computes (a day, an ISO
//! week, a month in a time zone; see `Calendar` under the `calendar` feature) and passes
//! to every transition, so the core needs no calendar and no time-zone database.

use crate::encoding::{self, tag, Reader};
use crate::fixed_window::window_decision;
use crate::limits::{MAX_LIMIT, MAX_PERIOD};
use crate::report::adjust_count;
use crate::{Algorithm, Decision, DecodeError, ParamError, Report, Ticks, MAX_TICKS};

/// The current period of a calendar, `[start, end)` in ticks: the instants a host's
/// calendar puts in one day, week or month.
///
/// Ranges: `start < end <= MAX_TICKS + 366 days`, at most 366 days long (a day of 23 or
/// 25 hours, a month of 28 to 31 days and a leap year all fit).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CalendarPeriod {
    start: Ticks,
    end: Ticks,
}

impl CalendarPeriod {
    /// The period from `start` (included) to `end` (excluded).
    pub fn new(start: Ticks, end: Ticks) -> Result<Self, ParamError> {
        let end = ParamError::check("end", end, 1, MAX_TICKS + MAX_PERIOD)?;
        ParamError::check("length", end.saturating_sub(start), 1, MAX_PERIOD)?;
        Ok(Self { start, end })
    }

    /// The first instant of the period.
    pub const fn start(&self) -> Ticks {
        self.start
    }

    /// The first instant after the period: the next period's start.
    pub const fn end(&self) -> Ticks {
        self.end
    }

    /// The period if it holds `now`, else [`ParamError::OutOfRange`] named `"now"` with
    /// the period's first and last instants: the check a host applies before deciding in
    /// a period it computed, so a period gone stale is computed again, never counted in.
    pub fn holding(self, now: Ticks) -> Result<Self, ParamError> {
        ParamError::check("now", now, self.start, self.end - 1).map(|_| self)
    }
}

/// Calendar window: at most `limit` units of cost per calendar period; a request of cost
/// `c` is admitted iff `count + c <= limit`, and adds `c` to the period's count. Decided
/// with the period's boundaries, through [`during`](Self::during).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CalendarWindow {
    limit: u64,
    overdraft: u64,
}

/// The state of a calendar window: the end of the period it counts, and its count.
///
/// The end, not the start: it says alone when the state is fresh (for a sweep, a TTL)
/// and how long until then, exactly, whatever period the host passes next; the period a
/// count belongs to is the one that ends there (periods never overlap).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CalendarWindowState {
    end: Ticks,
    count: u64,
}

impl CalendarWindow {
    /// At most `limit` (up to 10^9) per calendar period.
    pub fn new(limit: u64) -> Result<Self, ParamError> {
        Ok(Self {
            limit: ParamError::check("limit", limit, 1, MAX_LIMIT)?,
            overdraft: 0,
        })
    }

    /// The same limit, letting a report count up to `overdraft` (at most 10^9) units
    /// beyond it, until the period ends.
    pub fn with_overdraft(self, overdraft: u64) -> Result<Self, ParamError> {
        Ok(Self {
            overdraft: ParamError::check("overdraft", overdraft, 0, MAX_LIMIT)?,
            ..self
        })
    }

    /// The units of cost admitted per period.
    pub const fn limit(&self) -> u64 {
        self.limit
    }

    /// The most units a report may count beyond the limit.
    pub const fn overdraft(&self) -> u64 {
        self.overdraft
    }

    /// This window in `period`: the [`Algorithm`] (and [`Report`]) a host runs with the
    /// boundaries of the period holding the request's time.
    pub const fn during(self, period: CalendarPeriod) -> CalendarWindowAt {
        self.within(period)
    }

    /// This window in the periods `periods` gives at each transition's `now`.
    pub const fn within<P: PeriodOf>(self, periods: P) -> CalendarWindowAt<P> {
        CalendarWindowAt {
            window: self,
            period: periods,
        }
    }
}

/// Where a calendar window finds the period holding `now`: one period the host computed
/// for the transition ([`CalendarPeriod`]), or a calendar asked at each transition (see
/// `CalendarLimit`). One transition serves both, so every host stores the same bytes.
pub trait PeriodOf {
    /// The period to decide `now` (at most [`MAX_TICKS`]) in, or why there is none: the
    /// window then refuses, changing nothing.
    fn period_of(&self, now: Ticks) -> Result<CalendarPeriod, ParamError>;
}

/// The period itself, whatever `now` (a `now` outside it is clamped into it, as the
/// Redis scripts do at a caller's time; hosts check [`CalendarPeriod::holding`] first).
impl PeriodOf for CalendarPeriod {
    fn period_of(&self, _: Ticks) -> Result<CalendarPeriod, ParamError> {
        Ok(*self)
    }
}

/// A [`CalendarWindow`] in its current period (see [`CalendarWindow::during`]), or in
/// the periods of a calendar (see [`CalendarWindow::within`]).
///
/// A `now` outside a given period is decided as at its nearest instant in it; a calendar
/// whose period does not hold `now` is refused: denied as a cost that never fits, nothing
/// counted or reported. A stored count whose period has not ended at `now` (a state
/// written at a later time, when `now` went backwards over a boundary) is decided in its
/// own period, to its own end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CalendarWindowAt<P = CalendarPeriod> {
    window: CalendarWindow,
    period: P,
}

impl CalendarWindowAt {
    /// The period it decides in.
    pub const fn period(&self) -> CalendarPeriod {
        self.period
    }
}

impl<P: PeriodOf> CalendarWindowAt<P> {
    /// The window's parameters.
    pub const fn window(&self) -> CalendarWindow {
        self.window
    }

    /// `now` within its period, and the period's end and count to decide on there; none
    /// where the period is refused.
    fn current(
        &self,
        state: Option<CalendarWindowState>,
        now: Ticks,
    ) -> Option<(Ticks, Ticks, u64)> {
        let now = now.min(MAX_TICKS);
        let period = self.period.period_of(now).ok()?;
        let now = now.clamp(period.start, period.end - 1);
        Some(match state {
            Some(s) if s.end > now => (now, s.end, s.count),
            _ => (now, period.end, 0),
        })
    }

    /// Where the period of the whole calendar lives (see `CalendarLimit`).
    #[cfg(feature = "alloc")]
    pub(crate) const fn periods(&self) -> &P {
        &self.period
    }
}

#[cfg(feature = "alloc")]
impl<P: PeriodOf + PartialEq> CalendarWindowAt<P> {
    /// `state` of `from` as this window's at `now` (see `AnyAlgorithm::carry_from`):
    /// in the same period where the calendars are equal, else the count of the period
    /// holding `now` in this calendar's period holding it; at most this limit and its
    /// overdraft.
    pub(crate) fn carry(
        &self,
        from: &Self,
        state: &CalendarWindowState,
        now: Ticks,
    ) -> Option<CalendarWindowState> {
        let now = now.min(MAX_TICKS);
        // A period that ended by `now` holds nothing.
        if state.end <= now {
            return None;
        }
        let end = if self.period == from.period {
            state.end
        } else {
            self.period.period_of(now).ok()?.end
        };
        let count = state.count.min(self.window.limit + self.window.overdraft);
        (count > 0).then_some(CalendarWindowState { end, count })
    }
}

impl<P: PeriodOf> Algorithm for CalendarWindowAt<P> {
    type State = CalendarWindowState;

    fn decide(
        &self,
        state: Option<CalendarWindowState>,
        now: Ticks,
        cost: u64,
    ) -> (Decision, Option<CalendarWindowState>) {
        let Some((now, end, count)) = self.current(state, now) else {
            return (Decision::deny(self.window.limit, 0, None, 0), state);
        };
        let (decision, count) = window_decision(self.window.limit, count, cost, false, end - now);
        (
            decision,
            (count > 0).then_some(CalendarWindowState { end, count }),
        )
    }

    fn encode<E: Extend<u8>>(&self, state: &CalendarWindowState, out: &mut E) {
        encoding::write(out, tag::CALENDAR_WINDOW, &[state.end, state.count]);
    }

    fn decode(&self, bytes: &[u8]) -> Result<CalendarWindowState, DecodeError> {
        let mut reader = Reader::new(bytes, tag::CALENDAR_WINDOW)?;
        let end = reader.u64_where("end", &|e| (1..=MAX_TICKS + MAX_PERIOD).contains(&e))?;
        let most = self.window.limit + self.window.overdraft;
        let count = reader.u64_where("count", &|c| (1..=most).contains(&c))?;
        reader.finish()?;
        Ok(CalendarWindowState { end, count })
    }
}

impl<P: PeriodOf> Report for CalendarWindowAt<P> {
    fn overdraft(&self) -> u64 {
        self.window.overdraft()
    }

    /// On the current period's count, at most `limit + overdraft`.
    fn adjust(
        &self,
        state: Option<CalendarWindowState>,
        now: Ticks,
        adjustment: i64,
    ) -> (u64, Option<CalendarWindowState>) {
        let Some((_, end, count)) = self.current(state, now) else {
            return (0, state);
        };
        let room = (self.window.limit + self.window.overdraft).saturating_sub(count);
        let (recorded, count) = adjust_count(count, room, adjustment);
        (
            recorded,
            (count > 0).then_some(CalendarWindowState { end, count }),
        )
    }
}
