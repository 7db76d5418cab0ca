//! Limiter options as JS passes them, read into the core's parameters for
//! [`AnyAlgorithm::new`], with clear messages.
//!
//! The reading is written against [`Fields`], so it runs (and is tested) without a JS
//! engine; the bindings read the options as `limiter.js` flattens them ([`Flat`]).

use alloc::string::String;
#[cfg(feature = "full")]
use alloc::vec::Vec;

use sluicegate_core::{AnyAlgorithm, Kind, Ticks};
#[cfg(feature = "full")]
use sluicegate_core::{Field, Params};

use crate::error::{runs, Error};
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
    #[cfg(feature = "full")]
    fn list(&self, name: &'static str) -> Result<Option<Vec<Self>>, Error>;
    /// An array of numbers.
    #[cfg(feature = "full")]
    fn numbers(&self, name: &'static str) -> Result<Option<Vec<f64>>, Error>;
}

/// The algorithm `options` describe:
/// `{ algorithm, limit, periodMs, countDenied? }` for windows,
/// `{ algorithm, capacity, rate, periodMs }` for buckets and pacing, and in the full
/// module `{ algorithm, members: [options, ...] }` for a composite,
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
    #[cfg(not(feature = "full"))]
    if let Some(name) = [(overdraft.is_some(), "overdraft"), (ban.is_some(), "ban")]
        .into_iter()
        .find_map(|(given, name)| given.then_some(name))
    {
        return Err(Error::FullOnly(name));
    }
    build(options, kind, name, overdraft, ban)
}

/// The algorithm of `kind` from the rest of `options`, through the core's one
/// constructor.
#[cfg(feature = "full")]
fn build<F: Fields>(
    options: &F,
    kind: Kind,
    name: String,
    overdraft: Option<f64>,
    ban: Option<F>,
) -> Result<AnyAlgorithm, Error> {
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
    if let Some(ban) = ban {
        let threshold = required_whole(&ban, "threshold")?;
        let window = required_ms(&ban, "windowMs")?;
        let duration = required_ms(&ban, "durationMs")?;
        return Ok(sluicegate_core::Ban::new(any, threshold, window, duration)?.into());
    }
    Ok(any)
}

/// The client's six algorithms, each from its own constructor (no overdraft, no ban:
/// refused before): the client links none of the core's constructor over every kind
/// (composites, calendars, leases), 1.3 KB gzipped.
#[cfg(not(feature = "full"))]
fn build<F: Fields>(
    options: &F,
    kind: Kind,
    name: String,
    _: Option<f64>,
    _: Option<F>,
) -> Result<AnyAlgorithm, Error> {
    use sluicegate_core::{
        FixedWindow, LeakyBucket, Pacing, SlidingCounter, SlidingLog, TokenBucket,
    };
    let bucket = || -> Result<_, Error> {
        let capacity = required_whole(options, "capacity")?;
        let rate = required_whole(options, "rate")?;
        Ok((capacity, rate, required_ms(options, "periodMs")?))
    };
    let window = || -> Result<_, Error> {
        let limit = required_whole(options, "limit")?;
        Ok((limit, required_ms(options, "periodMs")?))
    };
    Ok(match kind {
        Kind::FixedWindow => {
            let (limit, period) = window()?;
            let window = FixedWindow::new(limit, period)?;
            if options.flag("countDenied")?.unwrap_or(false) {
                window.counting_denied()
            } else {
                window
            }
            .into()
        }
        Kind::SlidingLog => {
            let (limit, period) = window()?;
            SlidingLog::new(limit, period)?.into()
        }
        Kind::SlidingCounter => {
            let (limit, period) = window()?;
            SlidingCounter::new(limit, period)?.into()
        }
        Kind::TokenBucket => {
            let (capacity, rate, period) = bucket()?;
            TokenBucket::new(capacity, rate, period)?.into()
        }
        Kind::LeakyBucket => {
            let (capacity, rate, period) = bucket()?;
            LeakyBucket::new(capacity, rate, period)?.into()
        }
        Kind::Pacing => {
            let (capacity, rate, period) = bucket()?;
            Pacing::new(capacity, rate, period)?.into()
        }
        _ => return Err(Error::UnknownAlgorithm(name)),
    })
}

/// `{ calendar: "day" | "week" | "month", timeZone?, boundariesMs? }`: the periods
/// between `boundariesMs` (computed by the caller, say with `Intl`), else those of the
/// IANA zone (default UTC) from the `calendar` feature's database.
// Outlined: 250 bytes smaller gzipped than inlined into the reader.
#[cfg(feature = "full")]
#[inline(never)]
fn calendar(
    options: &impl Fields,
) -> Result<alloc::sync::Arc<dyn sluicegate_core::calendar::CalendarPeriods>, Error> {
    let name = options.text("calendar")?.unwrap_or_default();
    if !matches!(name.as_str(), "day" | "week" | "month") {
        return Err(Error::Calendar(name));
    }
    let zone = options.text("timeZone")?;
    if let Some(boundaries) = options.numbers("boundariesMs")? {
        let zone = zone.as_deref().unwrap_or("UTC");
        let table = crate::periods::PeriodTable::new(name + " in " + zone, &boundaries)?;
        return Ok(alloc::sync::Arc::new(table));
    }
    zoned(&name, zone)
}

/// `calendar`'s periods in `zone` (default UTC) from the bundled database.
#[cfg(feature = "calendar")]
fn zoned(
    calendar: &str,
    zone: Option<String>,
) -> Result<alloc::sync::Arc<dyn sluicegate_core::calendar::CalendarPeriods>, Error> {
    use sluicegate_core::calendar::{Calendar, CalendarZone, ZonedCalendar};

    let calendar = Calendar::from_name(calendar).ok_or_else(|| Error::Calendar(calendar.into()))?;
    let zone = match zone {
        Some(zone) => CalendarZone::named(&zone),
        None => Ok(CalendarZone::UTC),
    };
    let periods = zone
        .and_then(|zone| ZonedCalendar::new(calendar, zone))
        .map_err(Error::TimeZone)?;
    Ok(alloc::sync::Arc::new(periods))
}

/// Without the database, only the caller's boundaries.
#[cfg(all(feature = "full", not(feature = "calendar")))]
fn zoned(
    _: &str,
    _: Option<String>,
) -> Result<alloc::sync::Arc<dyn sluicegate_core::calendar::CalendarPeriods>, Error> {
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

/// An options object as `flatten` in `limiter.js` writes it: JS checks each field's
/// type and passes numbers and texts, no objects, so the module reads no JS values.
/// Each object is a node of [`NODE`] numbers (NaN for absent) at its offset in
/// `numbers`; its texts (`algorithm`, `calendar`, `timeZone`; empty for absent) are
/// three in `texts` from three times its ordinal. Anything out of place reads as absent.
pub(crate) struct Flat<'a> {
    numbers: &'a [f64],
    texts: &'a [&'a str],
    at: usize,
}

/// The numbers of a node: the number fields in this order, then `countDenied` (0 or 1),
/// the offsets of `ban`, of `members` (a list of offsets) and its length, of
/// `boundariesMs` and its length, and the node's ordinal.
const NUMBERS: [&str; 8] = [
    "limit",
    "capacity",
    "rate",
    "periodMs",
    "overdraft",
    "threshold",
    "windowMs",
    "durationMs",
];
const NODE: usize = 15;

impl<'a> Flat<'a> {
    /// The options flattened into `numbers` and `texts`, the root first.
    pub(crate) fn root(numbers: &'a [f64], texts: &'a [&'a str]) -> Self {
        Self {
            numbers,
            texts,
            at: 0,
        }
    }

    /// Slot `index` of this node, if present.
    fn slot(&self, index: usize) -> Option<f64> {
        let value = *self.numbers.get(self.at.checked_add(index)?)?;
        (!value.is_nan()).then_some(value)
    }

    /// The node at `offset`.
    fn node(&self, offset: f64) -> Self {
        Self {
            at: as_index(offset),
            ..*self
        }
    }

    /// The numbers at the offset in slot `index`, as many as the slot after it says.
    #[cfg(feature = "full")]
    fn run(&self, index: usize) -> Option<&'a [f64]> {
        let start = as_index(self.slot(index)?);
        let len = as_index(self.slot(index + 1)?);
        self.numbers.get(start..start.checked_add(len)?)
    }
}

/// A whole number `limiter.js` wrote as an offset or a length.
fn as_index(value: f64) -> usize {
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let index = value as usize;
    index
}

impl Fields for Flat<'_> {
    fn number(&self, name: &'static str) -> Result<Option<f64>, Error> {
        Ok(NUMBERS
            .iter()
            .position(|&n| n == name)
            .and_then(|index| self.slot(index)))
    }

    fn text(&self, name: &'static str) -> Result<Option<String>, Error> {
        let Some(index) = ["algorithm", "calendar", "timeZone"]
            .iter()
            .position(|&n| n == name)
        else {
            return Ok(None);
        };
        let ordinal = self.slot(NODE - 1).map_or(usize::MAX, as_index);
        let text = ordinal
            .checked_mul(3)
            .and_then(|first| self.texts.get(first.checked_add(index)?))
            .filter(|text| !text.is_empty());
        Ok(text.map(|&text| String::from(text)))
    }

    fn flag(&self, _: &'static str) -> Result<Option<bool>, Error> {
        Ok(self.slot(8).map(|flag| flag != 0.0))
    }

    fn object(&self, _: &'static str) -> Result<Option<Self>, Error> {
        Ok(self.slot(9).map(|offset| self.node(offset)))
    }

    #[cfg(feature = "full")]
    fn list(&self, _: &'static str) -> Result<Option<Vec<Self>>, Error> {
        Ok(self
            .run(10)
            .map(|offsets| offsets.iter().map(|&offset| self.node(offset)).collect()))
    }

    #[cfg(feature = "full")]
    fn numbers(&self, _: &'static str) -> Result<Option<Vec<f64>>, Error> {
        Ok(self.run(12).map(<[f64]>::to_vec))
    }
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
        #[cfg(feature = "full")]
        List(Vec<Options>),
        #[cfg(feature = "full")]
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
        /// The field `name` read by `read`: JS checks the types (`flatten`), so a test
        /// writes each field with its own.
        fn typed<T>(
            &self,
            name: &'static str,
            expected: &'static str,
            read: impl FnOnce(&Value) -> Option<T>,
        ) -> Result<Option<T>, Error> {
            Ok(self
                .0
                .get(name)
                .map(|value| read(value).unwrap_or_else(|| panic!("{name} must be {expected}"))))
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
        #[cfg(feature = "full")]
        fn list(&self, name: &'static str) -> Result<Option<Vec<Self>>, Error> {
            self.typed(name, "an array", |v| match v {
                Value::List(l) => Some(l.clone()),
                _ => None,
            })
        }
        #[cfg(feature = "full")]
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

    #[cfg(feature = "full")]
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
        ];
        #[cfg(feature = "full")]
        let cases = cases.into_iter().chain([
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
        ]);
        #[cfg(not(feature = "full"))]
        let cases = cases.into_iter().chain([
            (
                Options::new(Kind::Composite),
                "unknown algorithm \"composite\"",
            ),
            (
                window(Kind::FixedWindow, 5.0, 1000.0).number("overdraft", 1.0),
                "options.overdraft needs the full module",
            ),
            (
                window(Kind::FixedWindow, 5.0, 1000.0)
                    .with("ban", Value::Object(Options::default())),
                "options.ban needs the full module",
            ),
        ]);
        for (options, message) in cases {
            let err = algorithm(&options).unwrap_err().message();
            assert!(err.contains(message), "{err:?} should contain {message:?}");
        }
    }

    /// A calendar window of 2 a day in New York, on `boundaries` if given.
    #[cfg(feature = "full")]
    pub(crate) fn calendar_options(boundaries: Option<Vec<f64>>) -> Options {
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
    #[cfg(feature = "full")]
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

    #[cfg(feature = "full")]
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
            let err = algorithm(&options).unwrap_err().message();
            assert!(err.contains(message), "{err:?} should contain {message:?}");
        }
        let zoned = algorithm(&calendar_options(None));
        if cfg!(feature = "calendar") {
            assert!(zoned.is_ok());
        } else {
            let err = zoned.unwrap_err().message();
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
        let message = Error::UnknownAlgorithm("x".into()).message();
        for kind in Kind::ALL {
            let listed = message.contains(&format!("\"{kind}\""));
            assert_eq!(listed, runs(kind), "{message}");
        }
        assert!(message.contains("\" or \""), "{message}");
    }

    /// Options as `flatten` (limiter.js) writes them read as the same options.
    #[test]
    fn flattened_options_read_as_the_objects() {
        let nan = f64::NAN;
        // A fixed window counting denied hits, its ban the second node.
        let mut numbers = vec![
            3.0, nan, nan, 1000.0, nan, nan, nan, nan, 1.0, 15.0, nan, nan, nan, nan, 0.0,
        ];
        numbers.extend([
            nan, nan, nan, nan, nan, 1.0, 1000.0, 60_000.0, nan, nan, nan, nan, nan, nan, 1.0,
        ]);
        let texts = ["fixed-window", "", "", "", "", ""];
        let flat = Flat::root(&numbers, &texts);
        let expected =
            window(Kind::FixedWindow, 3.0, 1000.0).with("countDenied", Value::Flag(true));
        assert_eq!(
            flat.text("algorithm").unwrap().as_deref(),
            Some("fixed-window")
        );
        assert_eq!(flat.text("calendar").unwrap(), None);
        assert_eq!(
            flat.number("limit").unwrap(),
            Fields::number(&expected, "limit").unwrap()
        );
        assert_eq!(flat.number("capacity").unwrap(), None);
        assert_eq!(flat.flag("countDenied").unwrap(), Some(true));
        let ban = flat.object("ban").unwrap().unwrap();
        assert_eq!(ban.number("durationMs").unwrap(), Some(60_000.0));
        assert_eq!(ban.text("algorithm").unwrap(), None);
        #[cfg(feature = "full")]
        assert!(flat.list("members").unwrap().is_none());
        #[cfg(feature = "full")]
        assert_eq!(
            format!("{:?}", algorithm(&flat).unwrap()),
            format!(
                "{:?}",
                algorithm(
                    &expected.with(
                        "ban",
                        Value::Object(
                            Options::default()
                                .number("threshold", 1.0)
                                .number("windowMs", 1000.0)
                                .number("durationMs", 60_000.0)
                        )
                    )
                )
                .unwrap()
            )
        );
        // Offsets and lengths out of place read as absent, never out of bounds.
        numbers[9] = 1e9;
        let flat = Flat::root(&numbers, &texts);
        assert_eq!(
            flat.object("ban")
                .unwrap()
                .unwrap()
                .number("limit")
                .unwrap(),
            None
        );
        assert_eq!(Flat::root(&[], &[]).text("algorithm").unwrap(), None);
    }
}
