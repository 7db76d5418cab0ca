//! The one constructor of a rate algorithm from a [`Kind`] and its parameters, which
//! policy files, JS options and Redis commands each fill from their own syntax.

use alloc::sync::Arc;
use alloc::vec::Vec;

use crate::{
    AnyAlgorithm, CalendarLimit, CalendarPeriods, CalendarWindow, Composite, FixedWindow, Kind,
    LeakyBucket, Pacing, ParamError, SlidingCounter, SlidingLog, Ticks, TokenBucket,
};

/// The parameters of a rate algorithm of any [`Kind`], for [`AnyAlgorithm::new`]: the
/// ones its kind takes ([`Kind::fields`]) are set, the others stay unset (zero).
///
/// ```
/// use sluicegate_core::{AnyAlgorithm, Kind, Params, TokenBucket, SECOND};
///
/// let params = Params::new().capacity(10).rate(5).period(SECOND);
/// let bucket = AnyAlgorithm::new(Kind::TokenBucket, params)?;
/// assert_eq!(bucket, TokenBucket::new(10, 5, SECOND)?.into());
/// # Ok::<(), sluicegate_core::ParamError>(())
/// ```
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct Params {
    limit: u64,
    capacity: u64,
    rate: u64,
    period: Ticks,
    overdraft: u64,
    count_denied: bool,
    calendar: Option<Arc<dyn CalendarPeriods>>,
    members: Vec<AnyAlgorithm>,
}

impl Params {
    /// No parameter set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Windows and calendar windows: units per period.
    pub fn limit(mut self, limit: u64) -> Self {
        self.limit = limit;
        self
    }

    /// Buckets and pacing: the most units held (or waiting).
    pub fn capacity(mut self, capacity: u64) -> Self {
        self.capacity = capacity;
        self
    }

    /// Buckets and pacing: units refilled, leaked or spaced per period.
    pub fn rate(mut self, rate: u64) -> Self {
        self.rate = rate;
        self
    }

    /// Windows, buckets and pacing: the period, in ticks.
    pub fn period(mut self, period: Ticks) -> Self {
        self.period = period;
        self
    }

    /// The kinds that [take an overdraft](Kind::takes_overdraft): the most a reported
    /// cost takes a key beyond its limit (default 0).
    pub fn overdraft(mut self, overdraft: u64) -> Self {
        self.overdraft = overdraft;
        self
    }

    /// The fixed window: count denied cost too
    /// ([`FixedWindow::counting_denied`]).
    pub fn count_denied(mut self, count_denied: bool) -> Self {
        self.count_denied = count_denied;
        self
    }

    /// Calendar windows: the calendar whose periods the window counts in.
    pub fn calendar(mut self, calendar: Arc<dyn CalendarPeriods>) -> Self {
        self.calendar = Some(calendar);
        self
    }

    /// Composites: the member limits.
    pub fn members(mut self, members: Vec<AnyAlgorithm>) -> Self {
        self.members = members;
        self
    }
}

impl AnyAlgorithm {
    /// The algorithm of `kind` with `params`: the one constructor behind policy files,
    /// JS options and Redis commands. Leases are not a rate algorithm
    /// ([`ParamError::NotRate`]); an overdraft, denied counting or a calendar given to a
    /// kind that takes none is [`ParamError::NotTaken`].
    pub fn new(kind: Kind, params: Params) -> Result<Self, ParamError> {
        let Params {
            limit,
            capacity,
            rate,
            period,
            overdraft,
            count_denied,
            calendar,
            members,
        } = params;
        let refused = [
            ("overdraft", overdraft > 0 && !kind.takes_overdraft()),
            ("count_denied", count_denied && kind != Kind::FixedWindow),
            (
                "calendar",
                calendar.is_some() && kind != Kind::CalendarWindow,
            ),
            ("limits", !members.is_empty() && kind != Kind::Composite),
        ];
        if let Some(&(name, _)) = refused.iter().find(|(_, given)| *given) {
            return Err(ParamError::NotTaken { kind, name });
        }
        Ok(match kind {
            Kind::FixedWindow => {
                let window = FixedWindow::new(limit, period)?.with_overdraft(overdraft)?;
                if count_denied {
                    window.counting_denied()
                } else {
                    window
                }
                .into()
            }
            Kind::SlidingLog => SlidingLog::new(limit, period)?
                .with_overdraft(overdraft)?
                .into(),
            Kind::SlidingCounter => SlidingCounter::new(limit, period)?
                .with_overdraft(overdraft)?
                .into(),
            Kind::TokenBucket => TokenBucket::new(capacity, rate, period)?
                .with_overdraft(overdraft)?
                .into(),
            Kind::LeakyBucket => LeakyBucket::new(capacity, rate, period)?
                .with_overdraft(overdraft)?
                .into(),
            Kind::Pacing => Pacing::new(capacity, rate, period)?.into(),
            Kind::CalendarWindow => {
                let calendar = calendar.ok_or(ParamError::Missing {
                    kind,
                    name: "calendar",
                })?;
                let window = CalendarWindow::new(limit)?.with_overdraft(overdraft)?;
                CalendarLimit::new(window, calendar).into()
            }
            Kind::Composite => Composite::new(members)?.into(),
            Kind::Concurrency => return Err(ParamError::NotRate(kind)),
        })
    }
}
