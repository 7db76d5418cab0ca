//! A calendar window's periods as JS passes them (`boundariesMs`, computed with the
//! browser's own time-zone data): calendar windows without the `calendar` feature's
//! zone database.

use alloc::string::String;
use alloc::vec::Vec;

use sluicegate_core::calendar::{CalendarPeriod, CalendarPeriods};
use sluicegate_core::Ticks;

use crate::error::Error;
use crate::units::ticks_from_ms;

/// Consecutive periods, each from one boundary to the next. An instant outside them gets
/// the nearest, which does not hold it, so a window refuses to decide there.
pub(crate) struct PeriodTable {
    name: String,
    periods: Vec<CalendarPeriod>,
    /// The last of them: what an instant after them gets.
    last: CalendarPeriod,
}

impl PeriodTable {
    /// The periods between `boundaries_ms` (milliseconds since the epoch, at least two,
    /// increasing), named `name`.
    pub(crate) fn new(name: String, boundaries_ms: &[f64]) -> Result<Self, Error> {
        let mut periods = Vec::new();
        let mut start = None;
        for &ms in boundaries_ms {
            let end = ticks_from_ms("boundariesMs", ms).map_err(|_| Error::Boundaries)?;
            if let Some(start) = start {
                periods.push(CalendarPeriod::new(start, end).map_err(|_| Error::Boundaries)?);
            }
            start = Some(end);
        }
        let last = *periods.last().ok_or(Error::Boundaries)?;
        Ok(Self {
            name,
            periods,
            last,
        })
    }
}

/// Its name, unquoted: quoting (a derived `Debug`) would bring Unicode tables into the
/// module.
impl core::fmt::Debug for PeriodTable {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(&self.name)
    }
}

impl CalendarPeriods for PeriodTable {
    fn period_at(&self, now: Ticks) -> CalendarPeriod {
        let after = self.periods.partition_point(|period| period.end() <= now);
        self.periods.get(after).copied().unwrap_or(self.last)
    }

    fn name(&self) -> String {
        self.name.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_instant_gets_the_period_holding_it_or_none() {
        let table = PeriodTable::new("day in UTC".into(), &[0.01, 0.02, 0.045]).unwrap();
        let at = |now| {
            let period = table.period_at(now);
            (period.start(), period.end(), period.holding(now).is_ok())
        };
        assert_eq!(at(9), (10, 20, false));
        assert_eq!(at(10), (10, 20, true));
        assert_eq!(at(19), (10, 20, true));
        assert_eq!(at(20), (20, 45, true));
        assert_eq!(at(44), (20, 45, true));
        assert_eq!(at(45), (20, 45, false));
    }

    #[test]
    fn boundaries_must_make_periods() {
        let year_ms = 366.0 * 86_400_000.0;
        for bad in [
            &[][..],
            &[5.0],
            &[5.0, 5.0],
            &[5.0, 4.0],
            &[0.0, year_ms + 1.0],
        ] {
            assert_eq!(
                PeriodTable::new(String::new(), bad).unwrap_err(),
                Error::Boundaries,
                "{bad:?}"
            );
        }
        assert!(PeriodTable::new(String::new(), &[0.0, year_ms]).is_ok());
        for time in [f64::NAN, -1.0] {
            let bad = PeriodTable::new(String::new(), &[0.0, time]);
            assert_eq!(bad.unwrap_err(), Error::Boundaries);
        }
    }
}
