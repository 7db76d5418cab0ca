//! Limiter options as JS passes them, read into an [`AnyAlgorithm`] with clear messages.
//!
//! The reading is written against [`Fields`], so it runs (and is tested) without a JS
//! engine; the bindings implement `Fields` for JS objects.

use sluicegate_core::{
    AnyAlgorithm, Ban, Composite, FixedWindow, Kind, LeakyBucket, Pacing, ParamError,
    SlidingCounter, SlidingLog, Ticks, TokenBucket,
};

use crate::units::{ms_text, ticks_from_ms, whole};

/// The `algorithm` values, the core's kind names (`"leaky-pacing"` is still read as
/// `"pacing"`).
pub const ALGORITHMS: &str = "\"fixed-window\", \"sliding-log\", \"sliding-counter\", \
    \"token-bucket\", \"leaky-bucket\", \"pacing\", \"composite\" or \"calendar-window\" \
    (with the calendar feature)";

/// Named fields of an options object. Each getter is `Ok(None)` when the field is
/// absent (or `undefined`) and an error when it holds the wrong type.
pub trait Fields: Sized {
    /// A number field.
    fn number(&self, name: &str) -> Result<Option<f64>, String>;
    /// A string field.
    fn text(&self, name: &str) -> Result<Option<String>, String>;
    /// A boolean field.
    fn flag(&self, name: &str) -> Result<Option<bool>, String>;
    /// A nested options object.
    fn object(&self, name: &str) -> Result<Option<Self>, String>;
    /// An array of options objects.
    fn list(&self, name: &str) -> Result<Option<Vec<Self>>, String>;
}

/// The algorithm `options` describe:
/// `{ algorithm, limit, periodMs, countDenied? }` for windows,
/// `{ algorithm, capacity, rate, periodMs }` for buckets and pacing,
/// `{ algorithm: "composite", members: [options, ...] }`,
/// `{ algorithm: "calendar-window", limit, calendar, timeZone? }` (the `calendar`
/// feature), each with an optional `ban: { threshold, windowMs, durationMs }`; windows,
/// buckets and calendar windows with an optional `overdraft` (the most a reported cost
/// may take them beyond the limit; default 0).
pub fn algorithm(options: &impl Fields) -> Result<AnyAlgorithm, String> {
    let name = options
        .text("algorithm")?
        .ok_or_else(|| format!("options.algorithm is required: {ALGORITHMS}"))?;
    let window = || -> Result<(u64, Ticks), String> {
        Ok((required_whole(options, "limit")?, period(options)?))
    };
    let bucket = || -> Result<(u64, u64, Ticks), String> {
        Ok((
            required_whole(options, "capacity")?,
            required_whole(options, "rate")?,
            period(options)?,
        ))
    };
    let unknown = || format!("unknown algorithm \"{name}\": expected {ALGORITHMS}");
    let kind = Kind::from_name(&name).ok_or_else(unknown)?;
    let overdraft = options.number("overdraft")?;
    if overdraft.is_some()
        && (matches!(kind, Kind::Pacing | Kind::Composite) || options.object("ban")?.is_some())
    {
        return Err(
            "options.overdraft is for windows, buckets and calendar windows (a \
                    composite's members take their own; pacing and bans take no reports)"
                .to_owned(),
        );
    }
    let overdraft = overdraft.map_or(Ok(0), |o| whole("overdraft", o))?;
    let any = match kind {
        Kind::FixedWindow => {
            let (limit, period) = window()?;
            let fixed = FixedWindow::new(limit, period)
                .and_then(|w| w.with_overdraft(overdraft))
                .map_err(describe)?;
            let counting = options.flag("countDenied")?.unwrap_or(false);
            AnyAlgorithm::FixedWindow(if counting {
                fixed.counting_denied()
            } else {
                fixed
            })
        }
        Kind::SlidingLog => {
            let (limit, period) = window()?;
            let log = SlidingLog::new(limit, period).and_then(|l| l.with_overdraft(overdraft));
            AnyAlgorithm::SlidingLog(log.map_err(describe)?)
        }
        Kind::SlidingCounter => {
            let (limit, period) = window()?;
            let counter =
                SlidingCounter::new(limit, period).and_then(|c| c.with_overdraft(overdraft));
            AnyAlgorithm::SlidingCounter(counter.map_err(describe)?)
        }
        Kind::TokenBucket => {
            let (capacity, rate, period) = bucket()?;
            let token =
                TokenBucket::new(capacity, rate, period).and_then(|b| b.with_overdraft(overdraft));
            AnyAlgorithm::TokenBucket(token.map_err(describe)?)
        }
        Kind::LeakyBucket => {
            let (capacity, rate, period) = bucket()?;
            let leaky =
                LeakyBucket::new(capacity, rate, period).and_then(|b| b.with_overdraft(overdraft));
            AnyAlgorithm::LeakyBucket(leaky.map_err(describe)?)
        }
        #[cfg(feature = "calendar")]
        Kind::CalendarWindow => calendar_window(options, overdraft)?,
        Kind::Pacing => {
            let (capacity, rate, period) = bucket()?;
            AnyAlgorithm::Pacing(Pacing::new(capacity, rate, period).map_err(describe)?)
        }
        Kind::Composite => {
            let members = options
                .list("members")?
                .ok_or("options.members is required for a composite: an array of options")?;
            let members = members.iter().map(algorithm).collect::<Result<_, _>>()?;
            AnyAlgorithm::Composite(Composite::new(members).map_err(describe)?)
        }
        _ => return Err(unknown()),
    };
    let Some(ban) = options.object("ban")? else {
        return Ok(any);
    };
    let threshold = required_whole(&ban, "threshold")?;
    let window = required_ms(&ban, "windowMs")?;
    let duration = required_ms(&ban, "durationMs")?;
    let ban = Ban::new(any, threshold, window, duration).map_err(describe)?;
    Ok(ban.into())
}

/// `{ limit, calendar: "day" | "week" | "month", timeZone? }` (IANA; default UTC).
#[cfg(feature = "calendar")]
fn calendar_window(options: &impl Fields, overdraft: u64) -> Result<AnyAlgorithm, String> {
    use sluicegate_core::{Calendar, CalendarLimit, CalendarWindow, CalendarZone, ZonedCalendar};

    let limit = required_whole(options, "limit")?;
    let name = options.text("calendar")?.unwrap_or_default();
    let calendar = Calendar::from_name(&name).ok_or_else(|| {
        format!("options.calendar must be \"day\", \"week\" or \"month\", got {name:?}")
    })?;
    let zone = match options.text("timeZone")? {
        Some(zone) => CalendarZone::named(&zone),
        None => Ok(CalendarZone::UTC),
    };
    let periods = zone
        .and_then(|zone| ZonedCalendar::new(calendar, zone))
        .map_err(|e| format!("options.timeZone: {e}"))?;
    let window = CalendarWindow::new(limit)
        .and_then(|w| w.with_overdraft(overdraft))
        .map_err(describe)?;
    Ok(CalendarLimit::new(window, std::sync::Arc::new(periods)).into())
}

fn period(options: &impl Fields) -> Result<Ticks, String> {
    required_ms(options, "periodMs")
}

fn required_whole(options: &impl Fields, name: &str) -> Result<u64, String> {
    let value = options
        .number(name)?
        .ok_or_else(|| format!("options.{name} is required"))?;
    whole(name, value)
}

fn required_ms(options: &impl Fields, name: &str) -> Result<Ticks, String> {
    let value = options
        .number(name)?
        .ok_or_else(|| format!("options.{name} is required (milliseconds)"))?;
    ticks_from_ms(name, value)
}

/// The core's message, with durations in the milliseconds JS passed them in.
fn describe(error: ParamError) -> String {
    match error {
        ParamError::OutOfRange {
            name,
            value,
            min,
            max,
        } if matches!(name, "period" | "window" | "duration") => format!(
            "{name}Ms must be between {} and {} milliseconds, got {}",
            ms_text(min),
            ms_text(max),
            ms_text(value)
        ),
        other => other.to_string(),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::BTreeMap;

    use sluicegate_core::{Algorithm, SECOND};

    use super::*;

    /// Options as a test writes them.
    #[derive(Debug, Clone)]
    pub enum Value {
        Number(f64),
        Text(&'static str),
        Flag(bool),
        Object(Options),
        List(Vec<Options>),
    }

    /// An options object for tests.
    #[derive(Debug, Clone, Default)]
    pub struct Options(BTreeMap<&'static str, Value>);

    impl Options {
        pub fn new(algorithm: &'static str) -> Self {
            Self::default().with("algorithm", Value::Text(algorithm))
        }

        pub fn with(mut self, name: &'static str, value: Value) -> Self {
            self.0.insert(name, value);
            self
        }

        pub fn number(self, name: &'static str, value: f64) -> Self {
            self.with(name, Value::Number(value))
        }
    }

    impl Options {
        /// The field `name` read by `read`; any other kind of value is an error.
        fn typed<T>(
            &self,
            name: &str,
            expected: &str,
            read: impl FnOnce(&Value) -> Option<T>,
        ) -> Result<Option<T>, String> {
            self.0
                .get(name)
                .map(|value| {
                    read(value).ok_or_else(|| format!("options.{name} must be {expected}"))
                })
                .transpose()
        }
    }

    impl Fields for Options {
        fn number(&self, name: &str) -> Result<Option<f64>, String> {
            self.typed(name, "a number", |v| match v {
                Value::Number(n) => Some(*n),
                _ => None,
            })
        }
        fn text(&self, name: &str) -> Result<Option<String>, String> {
            self.typed(name, "a string", |v| match v {
                Value::Text(t) => Some((*t).to_owned()),
                _ => None,
            })
        }
        fn flag(&self, name: &str) -> Result<Option<bool>, String> {
            self.typed(name, "a boolean", |v| match v {
                Value::Flag(f) => Some(*f),
                _ => None,
            })
        }
        fn object(&self, name: &str) -> Result<Option<Self>, String> {
            self.typed(name, "an object", |v| match v {
                Value::Object(o) => Some(o.clone()),
                _ => None,
            })
        }
        fn list(&self, name: &str) -> Result<Option<Vec<Self>>, String> {
            self.typed(name, "an array", |v| match v {
                Value::List(l) => Some(l.clone()),
                _ => None,
            })
        }
    }

    pub fn bucket(algorithm: &'static str, capacity: f64, rate: f64, period_ms: f64) -> Options {
        Options::new(algorithm)
            .number("capacity", capacity)
            .number("rate", rate)
            .number("periodMs", period_ms)
    }

    pub fn window(algorithm: &'static str, limit: f64, period_ms: f64) -> Options {
        Options::new(algorithm)
            .number("limit", limit)
            .number("periodMs", period_ms)
    }

    #[test]
    fn every_algorithm_reads_into_the_cores_parameters() {
        let cases = [
            (
                window("fixed-window", 3.0, 1000.0),
                AnyAlgorithm::FixedWindow(FixedWindow::new(3, SECOND).unwrap()),
            ),
            (
                window("fixed-window", 3.0, 1000.0).with("countDenied", Value::Flag(true)),
                AnyAlgorithm::FixedWindow(FixedWindow::new(3, SECOND).unwrap().counting_denied()),
            ),
            (
                window("sliding-log", 3.0, 1.5),
                AnyAlgorithm::SlidingLog(SlidingLog::new(3, 1500).unwrap()),
            ),
            (
                window("sliding-counter", 7.0, 60_000.0),
                AnyAlgorithm::SlidingCounter(SlidingCounter::new(7, 60 * SECOND).unwrap()),
            ),
            (
                bucket("token-bucket", 3.0, 1.0, 1000.0),
                AnyAlgorithm::TokenBucket(TokenBucket::new(3, 1, SECOND).unwrap()),
            ),
            (
                bucket("leaky-bucket", 3.0, 2.0, 250.0),
                AnyAlgorithm::LeakyBucket(LeakyBucket::new(3, 2, SECOND / 4).unwrap()),
            ),
            (
                bucket("pacing", 0.0, 1.0, 1000.0),
                AnyAlgorithm::Pacing(Pacing::new(0, 1, SECOND).unwrap()),
            ),
            // The old name still reads.
            (
                bucket("leaky-pacing", 0.0, 1.0, 1000.0),
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
        let options = Options::new("composite")
            .with(
                "members",
                Value::List(vec![
                    window("fixed-window", 2.0, 1000.0),
                    bucket("token-bucket", 5.0, 5.0, 1000.0),
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
                Options::new("token-buckets"),
                "unknown algorithm \"token-buckets\"",
            ),
            // A kind the core has but a client cannot run.
            (
                Options::new("concurrency"),
                "unknown algorithm \"concurrency\"",
            ),
            (
                Options::new("token-bucket").with("capacity", Value::Text("5")),
                "options.capacity must be a number",
            ),
            (
                window("fixed-window", 5.0, 1000.0).with("countDenied", Value::Number(1.0)),
                "options.countDenied must be a boolean",
            ),
            (
                bucket("token-bucket", 5.0, 1.0, 1000.0).number("capacity", 0.0),
                "capacity must be between 1",
            ),
            (
                window("sliding-log", 1.5, 1000.0),
                "limit must be a whole number",
            ),
            (
                window("fixed-window", 5.0, 0.0),
                "periodMs must be between 0.001 and",
            ),
            (
                Options::new("fixed-window").number("limit", 5.0),
                "options.periodMs is required",
            ),
            (Options::new("composite"), "options.members is required"),
            (
                bucket("pacing", 1.0, 1.0, 1000.0).number("overdraft", 1.0),
                "options.overdraft is for windows",
            ),
            (
                window("fixed-window", 5.0, 1000.0).number("overdraft", -1.0),
                "overdraft must be a whole number",
            ),
            (
                Options::new("composite").with("members", Value::List(vec![])),
                "at least one member",
            ),
            (
                window("fixed-window", 5.0, 1000.0).with("ban", Value::Object(Options::default())),
                "options.threshold is required",
            ),
        ];
        for (options, message) in cases {
            let err = algorithm(&options).unwrap_err();
            assert!(err.contains(message), "{err:?} should contain {message:?}");
        }
    }
}
