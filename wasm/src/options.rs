//! Limiter options as JS passes them, read into the core's parameters for
//! [`AnyAlgorithm::new`], with clear messages.
//!
//! The reading is written against [`Fields`], so it runs (and is tested) without a JS
//! engine; the bindings implement `Fields` for JS objects.

use sluicegate_core::{AnyAlgorithm, Ban, Field, Kind, Params, Ticks};

use crate::error::{runs, Error};
use crate::periods::PeriodTable;
use crate::units::{ticks_from_ms, whole};

/// Named fields of an options object. Each getter is `Ok(None)` when the field is
/// absent (or `undefined`) and an error when it holds the wrong type.
pub(crate) trait Fields: Sized {
    /// A number field.
    fn number(&self, name: &'static str) -> Result<Option<f64>, Error>;
    /// A string field.
    fn text(&self, name: &'static str) -> Result<Option<String>, Error>;
    /// A boolean field.
    fn flag(&self, name: &'static str) -> Result<Option<bool>, Error>;
    /// A nested options object.
    fn object(&self, name: &'static str) -> Result<Option<Self>, Error>;
    /// An array of options objects.
    fn list(&self, name: &'static str) -> Result<Option<Vec<Self>>, Error>;
    /// An array of numbers.
    fn numbers(&self, name: &'static str) -> Result<Option<Vec<f64>>, Error>;
}

/// The algorithm `options` describe:
/// `{ algorithm, limit, periodMs, countDenied? }` for windows,
/// `{ algorithm, capacity, rate, periodMs }` for buckets and pacing,
/// `{ algorithm, members: [options, ...] }` for a composite,
/// `{ algorithm, limit, calendar, timeZone?, boundariesMs? }` for a calendar window,
/// each with an optional `ban: { threshold, windowMs, durationMs }`; the kinds
/// that take an overdraft with an optional `overdraft` (the most a reported cost may
/// take them beyond the limit; default 0). `algorithm` is a [`Kind`]'s name.
pub(crate) fn algorithm(options: &impl Fields) -> Result<AnyAlgorithm, Error> {
    let name = options.text("algorithm")?.ok_or(Error::NoAlgorithm)?;
    let Some(kind) = Kind::from_name(&name).filter(|&kind| runs(kind)) else {
        return Err(Error::UnknownAlgorithm(name));
    };
    let overdraft = options.number("overdraft")?;
    let ban = options.object("ban")?;
    if overdraft.is_some() && (!kind.takes_overdraft() || ban.is_some()) {
        return Err(Error::Overdraft);
    }
    let mut params = Params::new().overdraft(overdraft.map_or(Ok(0), |o| whole("overdraft", o))?);
    for field in kind.fields() {
        params = match field {
            Field::Limit => params.limit(required_whole(options, "limit")?),
            Field::Capacity => params.capacity(required_whole(options, "capacity")?),
            Field::Rate => params.rate(required_whole(options, "rate")?),
            Field::Period => params.period(required_ms(options, "periodMs")?),
            Field::Limits => {
                let members = options.list("members")?.ok_or(Error::NoMembers)?;
                params.members(members.iter().map(algorithm).collect::<Result<_, _>>()?)
            }
            Field::Calendar => params.calendar(calendar(options)?),
            // Leases: not run here (`runs`).
            _ => return Err(Error::UnknownAlgorithm(name)),
        };
    }
    if kind == Kind::FixedWindow {
        params = params.count_denied(options.flag("countDenied")?.unwrap_or(false));
    }
    let any = AnyAlgorithm::new(kind, params)?;
    let Some(ban) = ban else {
        return Ok(any);
    };
    let threshold = required_whole(&ban, "threshold")?;
    let window = required_ms(&ban, "windowMs")?;
    let duration = required_ms(&ban, "durationMs")?;
    Ok(Ban::new(any, threshold, window, duration)?.into())
}

/// `{ calendar: "day" | "week" | "month", timeZone?, boundariesMs? }`: the periods
/// between `boundariesMs` (computed by the caller, say with `Intl`), else those of the
/// IANA zone (default UTC) from the `calendar` feature's database.
// Outlined: 250 bytes smaller gzipped than inlined into the reader.
#[inline(never)]
fn calendar(
    options: &impl Fields,
) -> Result<std::sync::Arc<dyn sluicegate_core::calendar::CalendarPeriods>, Error> {
    let name = options.text("calendar")?.unwrap_or_default();
    if !matches!(name.as_str(), "day" | "week" | "month") {
        return Err(Error::Calendar(name));
    }
    let zone = options.text("timeZone")?;
    if let Some(boundaries) = options.numbers("boundariesMs")? {
        let zone = zone.as_deref().unwrap_or("UTC");
        let table = PeriodTable::new(name + " in " + zone, &boundaries)?;
        return Ok(std::sync::Arc::new(table));
    }
    zoned(&name, zone)
}

/// `calendar`'s periods in `zone` (default UTC) from the bundled database.
#[cfg(feature = "calendar")]
fn zoned(
    calendar: &str,
    zone: Option<String>,
) -> Result<std::sync::Arc<dyn sluicegate_core::calendar::CalendarPeriods>, Error> {
    use sluicegate_core::calendar::{Calendar, CalendarZone, ZonedCalendar};

    let calendar = Calendar::from_name(calendar).ok_or_else(|| Error::Calendar(calendar.into()))?;
    let zone = match zone {
        Some(zone) => CalendarZone::named(&zone),
        None => Ok(CalendarZone::UTC),
    };
    let periods = zone
        .and_then(|zone| ZonedCalendar::new(calendar, zone))
        .map_err(Error::TimeZone)?;
    Ok(std::sync::Arc::new(periods))
}

/// Without the database, only the caller's boundaries.
#[cfg(not(feature = "calendar"))]
fn zoned(
    _: &str,
    _: Option<String>,
) -> Result<std::sync::Arc<dyn sluicegate_core::calendar::CalendarPeriods>, Error> {
    Err(Error::NoBoundaries)
}

fn required_whole(options: &impl Fields, name: &'static str) -> Result<u64, Error> {
    let value = options.number(name)?.ok_or(Error::Required(name))?;
    whole(name, value)
}

fn required_ms(options: &impl Fields, name: &'static str) -> Result<Ticks, Error> {
    let value = options.number(name)?.ok_or(Error::RequiredMs(name))?;
    ticks_from_ms(name, value)
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::BTreeMap;

    use sluicegate_core::{
        Algorithm, FixedWindow, LeakyBucket, Pacing, SlidingCounter, SlidingLog, TokenBucket,
        SECOND,
    };

    use super::*;

    /// Options as a test writes them.
    #[derive(Debug, Clone)]
    pub(crate) enum Value {
        Number(f64),
        Text(&'static str),
        Flag(bool),
        Object(Options),
        List(Vec<Options>),
        Numbers(Vec<f64>),
    }

    /// An options object for tests.
    #[derive(Debug, Clone, Default)]
    pub(crate) struct Options(BTreeMap<&'static str, Value>);

    impl Options {
        pub(crate) fn new(kind: Kind) -> Self {
            Self::named(kind.name())
        }

        /// Options naming `algorithm`, a kind's name or not.
        pub(crate) fn named(algorithm: &'static str) -> Self {
            Self::default().with("algorithm", Value::Text(algorithm))
        }

        pub(crate) fn with(mut self, name: &'static str, value: Value) -> Self {
            self.0.insert(name, value);
            self
        }

        pub(crate) fn number(self, name: &'static str, value: f64) -> Self {
            self.with(name, Value::Number(value))
        }
    }

    impl Options {
        /// The field `name` read by `read`; any other kind of value is an error.
        fn typed<T>(
            &self,
            name: &'static str,
            expected: &'static str,
            read: impl FnOnce(&Value) -> Option<T>,
        ) -> Result<Option<T>, Error> {
            self.0
                .get(name)
                .map(|value| read(value).ok_or(Error::WrongType { name, expected }))
                .transpose()
        }
    }

    impl Fields for Options {
        fn number(&self, name: &'static str) -> Result<Option<f64>, Error> {
            self.typed(name, "a number", |v| match v {
                Value::Number(n) => Some(*n),
                _ => None,
            })
        }
        fn text(&self, name: &'static str) -> Result<Option<String>, Error> {
            self.typed(name, "a string", |v| match v {
                Value::Text(t) => Some((*t).to_owned()),
                _ => None,
            })
        }
        fn flag(&self, name: &'static str) -> Result<Option<bool>, Error> {
            self.typed(name, "a boolean", |v| match v {
                Value::Flag(f) => Some(*f),
                _ => None,
            })
        }
        fn object(&self, name: &'static str) -> Result<Option<Self>, Error> {
            self.typed(name, "an object", |v| match v {
                Value::Object(o) => Some(o.clone()),
                _ => None,
            })
        }
        fn list(&self, name: &'static str) -> Result<Option<Vec<Self>>, Error> {
            self.typed(name, "an array", |v| match v {
                Value::List(l) => Some(l.clone()),
                _ => None,
            })
        }
        fn numbers(&self, name: &'static str) -> Result<Option<Vec<f64>>, Error> {
            self.typed(name, "an array of numbers", |v| match v {
                Value::Numbers(n) => Some(n.clone()),
                _ => None,
            })
        }
    }

    pub(crate) fn bucket(kind: Kind, capacity: f64, rate: f64, period_ms: f64) -> Options {
        Options::new(kind)
            .number("capacity", capacity)
            .number("rate", rate)
            .number("periodMs", period_ms)
    }

    pub(crate) fn window(kind: Kind, limit: f64, period_ms: f64) -> Options {
        Options::new(kind)
            .number("limit", limit)
            .number("periodMs", period_ms)
    }

    #[test]
    fn every_algorithm_reads_into_the_cores_parameters() {
        let cases = [
            (
                window(Kind::FixedWindow, 3.0, 1000.0),
                AnyAlgorithm::FixedWindow(FixedWindow::new(3, SECOND).unwrap()),
            ),
            (
                window(Kind::FixedWindow, 3.0, 1000.0).with("countDenied", Value::Flag(true)),
                AnyAlgorithm::FixedWindow(FixedWindow::new(3, SECOND).unwrap().counting_denied()),
            ),
            (
                window(Kind::SlidingLog, 3.0, 1.5),
                AnyAlgorithm::SlidingLog(SlidingLog::new(3, 1500).unwrap()),
            ),
            (
                window(Kind::SlidingCounter, 7.0, 60_000.0),
                AnyAlgorithm::SlidingCounter(SlidingCounter::new(7, 60 * SECOND).unwrap()),
            ),
            (
                bucket(Kind::TokenBucket, 3.0, 1.0, 1000.0),
                AnyAlgorithm::TokenBucket(TokenBucket::new(3, 1, SECOND).unwrap()),
            ),
            (
                bucket(Kind::LeakyBucket, 3.0, 2.0, 250.0),
                AnyAlgorithm::LeakyBucket(LeakyBucket::new(3, 2, SECOND / 4).unwrap()),
            ),
            (
                bucket(Kind::Pacing, 0.0, 1.0, 1000.0),
                AnyAlgorithm::Pacing(Pacing::new(0, 1, SECOND).unwrap()),
            ),
        ];
        for (options, expected) in cases {
            let parsed = algorithm(&options).unwrap();
            assert_eq!(format!("{parsed:?}"), format!("{expected:?}"));
            let (decision, _) = parsed.decide(None, 0, 1);
            assert_eq!(decision, expected.decide(None, 0, 1).0);
        }
    }

    #[test]
    fn composite_and_ban_nest() {
        let options = Options::new(Kind::Composite)
            .with(
                "members",
                Value::List(vec![
                    window(Kind::FixedWindow, 2.0, 1000.0),
                    bucket(Kind::TokenBucket, 5.0, 5.0, 1000.0),
                ]),
            )
            .with(
                "ban",
                Value::Object(
                    Options::default()
                        .number("threshold", 1.0)
                        .number("windowMs", 1000.0)
                        .number("durationMs", 60_000.0),
                ),
            );
        let any = algorithm(&options).unwrap();
        assert!(!any.can_reserve());
        let (mut admitted, mut state) = (0, None);
        for _ in 0..5 {
            let (decision, next) = any.decide(state, 0, 1);
            admitted += u32::from(decision.allowed);
            state = next;
        }
        assert_eq!(admitted, 2);
        // Three denied (more than the threshold of 1): banned for a minute.
        let (decision, _) = any.decide(state, 2 * SECOND, 1);
        assert!(!decision.allowed);
        assert_eq!(decision.retry_after, Some(58 * SECOND));
    }

    #[test]
    fn bad_options_say_what_is_wrong() {
        let cases = [
            (Options::default(), "options.algorithm is required"),
            (
                Options::named("token-buckets"),
                "unknown algorithm \"token-buckets\"",
            ),
            // A kind the core has but a client cannot run.
            (
                Options::new(Kind::Concurrency),
                "unknown algorithm \"concurrency\"",
            ),
            (
                Options::new(Kind::TokenBucket).with("capacity", Value::Text("5")),
                "options.capacity must be a number",
            ),
            (
                window(Kind::FixedWindow, 5.0, 1000.0).with("countDenied", Value::Number(1.0)),
                "options.countDenied must be a boolean",
            ),
            (
                bucket(Kind::TokenBucket, 5.0, 1.0, 1000.0).number("capacity", 0.0),
                "capacity must be between 1",
            ),
            (
                window(Kind::SlidingLog, 1.5, 1000.0),
                "limit must be a whole number",
            ),
            (
                window(Kind::FixedWindow, 5.0, 0.0),
                "periodMs must be between 0.001 and",
            ),
            (
                Options::new(Kind::FixedWindow).number("limit", 5.0),
                "options.periodMs is required",
            ),
            (Options::new(Kind::Composite), "options.members is required"),
            (
                bucket(Kind::Pacing, 1.0, 1.0, 1000.0).number("overdraft", 1.0),
                "options.overdraft is for windows",
            ),
            (
                window(Kind::FixedWindow, 5.0, 1000.0).number("overdraft", -1.0),
                "overdraft must be a whole number",
            ),
            (
                Options::new(Kind::Composite).with("members", Value::List(vec![])),
                "at least one member",
            ),
            (
                window(Kind::FixedWindow, 5.0, 1000.0)
                    .with("ban", Value::Object(Options::default())),
                "options.threshold is required",
            ),
        ];
        for (options, message) in cases {
            let err = algorithm(&options).unwrap_err().to_string();
            assert!(err.contains(message), "{err:?} should contain {message:?}");
        }
    }

    fn calendar_options(boundaries: Option<Vec<f64>>) -> Options {
        let options = Options::new(Kind::CalendarWindow)
            .number("limit", 2.0)
            .with("calendar", Value::Text("day"))
            .with("timeZone", Value::Text("America/New_York"));
        match boundaries {
            Some(ms) => options.with("boundariesMs", Value::Numbers(ms)),
            None => options,
        }
    }

    /// A calendar window decides in the periods between the caller's boundaries, named
    /// as the zone's, and refuses outside them.
    #[test]
    fn a_calendar_window_decides_in_the_callers_boundaries() {
        let any = algorithm(&calendar_options(Some(vec![1000.0, 1500.5, 3000.0]))).unwrap();
        let AnyAlgorithm::CalendarWindow(limit) = &any else {
            panic!("{any:?}");
        };
        assert_eq!(limit.calendar().name(), "day in America/New_York");
        let (first, state) = any.decide(None, 1_000_000, 2);
        assert!(first.allowed);
        let (denied, _) = any.decide(state.clone(), 1_500_499, 1);
        assert_eq!(denied.retry_after, Some(1));
        assert!(any.decide(state, 1_500_500, 2).0.allowed);
        for outside in [999_999, 3_000_000] {
            assert_eq!(any.decide(None, outside, 1).0.retry_after, None);
        }
    }

    #[test]
    fn calendar_options_say_what_is_wrong() {
        let cases = [
            (
                calendar_options(Some(vec![1000.0])),
                "boundariesMs must be two or more increasing times",
            ),
            (
                calendar_options(Some(vec![2.0, 1.0])),
                "boundariesMs must be two or more increasing times",
            ),
            (
                calendar_options(Some(vec![0.0, -1.0])),
                "boundariesMs must be two or more increasing times",
            ),
            (
                calendar_options(Some(vec![])).with("calendar", Value::Text("year")),
                "options.calendar must be \"day\", \"week\" or \"month\", got \"year\"",
            ),
        ];
        for (options, message) in cases {
            let err = algorithm(&options).unwrap_err().to_string();
            assert!(err.contains(message), "{err:?} should contain {message:?}");
        }
        let zoned = algorithm(&calendar_options(None));
        if cfg!(feature = "calendar") {
            assert!(zoned.is_ok());
        } else {
            let err = zoned.unwrap_err().to_string();
            assert!(err.contains("boundariesMs is required"), "{err}");
        }
    }

    /// The TypeScript types name every rate algorithm (calendar windows with a note on
    /// their feature), each by a name the core reads.
    #[test]
    fn the_typescript_types_name_every_rate_algorithm() {
        let named: Vec<&str> = include_str!("../js/options.d.ts")
            .lines()
            .filter_map(|line| line.trim().strip_prefix("algorithm:"))
            .flat_map(|names| names.trim_end_matches(';').split('|'))
            .map(|name| name.trim().trim_matches('"'))
            .collect();
        let rates = Kind::ALL.into_iter().filter(|&k| k != Kind::Concurrency);
        for kind in rates {
            assert!(named.contains(&kind.name()), "{kind} is not in the types");
        }
        for name in named {
            let kind = Kind::from_name(name);
            assert!(kind.is_some_and(|k| k != Kind::Concurrency), "{name}");
        }
    }

    /// An unknown algorithm's message lists the kinds this build runs.
    #[test]
    fn unknown_algorithms_list_what_runs() {
        let message = Error::UnknownAlgorithm("x".into()).to_string();
        for kind in Kind::ALL {
            let listed = message.contains(&format!("\"{kind}\""));
            assert_eq!(listed, runs(kind), "{message}");
        }
        assert!(message.contains("\" or \""), "{message}");
    }
}
