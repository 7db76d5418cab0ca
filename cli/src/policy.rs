//! Policies from TOML or flags, durations like "250ms", and the algorithm each one builds.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::ops::Range;

use crate::backend::Hosted;
use serde::Deserialize;
use tollgate_core::limits::MAX_PERIOD;
use tollgate_core::{
    Concurrency, FixedWindow, LeakyBucket, Pacing, ParamError, SlidingCounter, SlidingLog, Ticks,
    TokenBucket,
};

use crate::Failure;

/// The algorithms a policy can name (the `--algorithm` values too).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    FixedWindow,
    SlidingLog,
    SlidingCounter,
    TokenBucket,
    LeakyBucket,
    LeakyPacing,
    /// Leases: at most `limit` held at once, each for `lease`. Only in policy files: a
    /// lock needs no policy (`tollgate lock`).
    #[value(skip)]
    Concurrency,
}

impl Kind {
    /// The name used in files and flags, e.g. `token-bucket`.
    pub fn name(self) -> String {
        if self == Self::Concurrency {
            // Not a flag value (skipped above), so clap has no name for it.
            return "concurrency".to_owned();
        }
        clap::ValueEnum::to_possible_value(&self)
            .map(|v| v.get_name().to_owned())
            .unwrap_or_default()
    }

    /// The parameters each algorithm takes: windows a limit and a period, buckets a
    /// capacity, a rate and a period, leases a limit and a lease.
    const fn fields(self) -> &'static [&'static str] {
        match self {
            Self::FixedWindow | Self::SlidingLog | Self::SlidingCounter => &["limit", "period"],
            Self::TokenBucket | Self::LeakyBucket | Self::LeakyPacing => {
                &["capacity", "rate", "period"]
            }
            Self::Concurrency => &["limit", "lease"],
        }
    }
}

/// One policy: an algorithm and its parameters, and seed 000's metadata.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    pub algorithm: Kind,
    /// Windows: units per period.
    pub limit: Option<u64>,
    /// Buckets: the most units held.
    pub capacity: Option<u64>,
    /// Buckets: units refilled or leaked per period.
    pub rate: Option<u64>,
    pub period: Option<Duration>,
    /// Leases: how long one is held unless renewed or released.
    pub lease: Option<Duration>,
    /// Applications allowed to use the policy; empty means any.
    #[serde(default)]
    pub apps: Vec<String>,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub owner: String,
    /// `tollgate fleet`'s settings for this policy: `fleet = { mode = "prefetch",
    /// max_batch = 100, interval = "100ms" }`.
    #[serde(default)]
    pub fleet: Option<crate::fleet::FleetSettings>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    policies: BTreeMap<String, Policy>,
}

/// Where each parameter of a policy is written, read once the file is known to be valid.
#[derive(Debug, Deserialize)]
struct SpanFile {
    policies: BTreeMap<String, toml::Spanned<Spans>>,
}

#[derive(Debug, Deserialize)]
struct Spans {
    limit: Option<toml::Spanned<toml::Value>>,
    capacity: Option<toml::Spanned<toml::Value>>,
    rate: Option<toml::Spanned<toml::Value>>,
    period: Option<toml::Spanned<toml::Value>>,
    lease: Option<toml::Spanned<toml::Value>>,
}

/// A duration in microseconds, written `"1500us"`, `"250ms"`, `"1s"`, `"5m"`, `"1h"`,
/// `"1d"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Duration(pub Ticks);

impl<'de> Deserialize<'de> for Duration {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        parse_duration(&text).map_err(serde::de::Error::custom)
    }
}

/// Units a duration is written in, largest first: (suffix, ticks, name for people).
const UNITS: [(&str, Ticks, &str); 6] = [
    ("d", 86_400_000_000, "days"),
    ("h", 3_600_000_000, "h"),
    ("m", 60_000_000, "min"),
    ("s", 1_000_000, "s"),
    ("ms", 1_000, "ms"),
    ("us", 1, "µs"),
];

pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let bad = || format!("bad duration {text:?}: use a whole number with us, ms, s, m, h or d");
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let scale = UNITS
        .iter()
        .find(|(suffix, _, _)| *suffix == unit)
        .map(|&(_, scale, _)| scale)
        .ok_or_else(bad)?;
    number
        .parse::<Ticks>()
        .ok()
        .and_then(|n| n.checked_mul(scale))
        .map(Duration)
        .ok_or_else(bad)
}

/// A duration as the flags and files write it, in its largest exact unit: `1s`, `1500ms`.
pub fn short(ticks: Ticks) -> String {
    let (suffix, scale, _) = UNITS
        .iter()
        .find(|(_, scale, _)| ticks.is_multiple_of(*scale))
        .copied()
        .unwrap_or(UNITS[5]);
    format!("{}{suffix}", ticks / scale)
}

/// A duration for people, in the largest unit it reaches, to at most three decimals:
/// `2 days`, `1.5 s`, `250 ms`, `0 s`.
pub fn human(ticks: Ticks) -> String {
    if ticks == 0 {
        return "0 s".into();
    }
    let (_, scale, name) = UNITS
        .iter()
        .find(|(_, scale, _)| ticks >= *scale)
        .copied()
        .unwrap_or(UNITS[5]);
    let whole = ticks / scale;
    // Thousandths of the unit, rounded to nearest.
    let milli = (u128::from(ticks % scale) * 1000 + u128::from(scale) / 2) / u128::from(scale);
    let (whole, milli) = if milli == 1000 {
        (whole + 1, 0)
    } else {
        (whole, milli)
    };
    let name = if name == "days" && whole == 1 && milli == 0 {
        "day"
    } else {
        name
    };
    if milli == 0 {
        format!("{whole} {name}")
    } else {
        let fraction = format!("{milli:03}");
        format!("{whole}.{} {name}", fraction.trim_end_matches('0'))
    }
}

/// `ticks` in the largest unit `step` is a whole number of, for the ticks of an axis:
/// `0`, `6 h`, `12 h`, `18 h`, `24 h`.
pub fn in_unit_of(ticks: Ticks, step: Ticks) -> String {
    if ticks == 0 {
        return "0".into();
    }
    let (_, scale, name) = UNITS
        .iter()
        .find(|(_, scale, _)| step.is_multiple_of(*scale) && ticks.is_multiple_of(*scale))
        .copied()
        .unwrap_or(UNITS[5]);
    let count = ticks / scale;
    let name = if name == "days" && count == 1 {
        "day"
    } else {
        name
    };
    format!("{count} {name}")
}

/// Reads the policy `name` from the TOML file at `path`, and builds its limiter.
pub fn load(path: &str, name: &str) -> Result<(Policy, Limiter), Failure> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Failure::Input(format!("cannot read {path}: {e}")))?;
    let file: File = toml::from_str(&text).map_err(|e| {
        let at = e
            .span()
            .map(|span| position(&text, &span))
            .unwrap_or_default();
        Failure::Input(format!("{path}{at}: {}", e.message().trim_end()))
    })?;
    let policy = file.policies.get(name).cloned().ok_or_else(|| {
        let known: Vec<&str> = file.policies.keys().map(String::as_str).collect();
        Failure::Input(format!(
            "{path}: no policy {name:?} (it has: {})",
            known.join(", ")
        ))
    })?;
    let limiter = policy.limiter(Style::File).map_err(|problem| {
        // Point at the value at fault, else at the policy's table.
        let spans: Option<toml::Spanned<Spans>> = toml::from_str::<SpanFile>(&text)
            .ok()
            .and_then(|mut f| f.policies.remove(name));
        let at = spans.map_or_else(String::new, |spans| {
            let field = problem.field.and_then(|field| match field {
                "limit" => spans.get_ref().limit.as_ref(),
                "capacity" => spans.get_ref().capacity.as_ref(),
                "rate" => spans.get_ref().rate.as_ref(),
                "period" => spans.get_ref().period.as_ref(),
                "lease" => spans.get_ref().lease.as_ref(),
                _ => None,
            });
            position(
                &text,
                &field.map_or_else(|| spans.span(), toml::Spanned::span),
            )
        });
        Failure::Input(format!("{path}{at}: policy {name:?}: {}", problem.message))
    })?;
    Ok((policy, limiter))
}

/// `:LINE:COLUMN` of the start of `span` in `text`, both counted from 1.
fn position(text: &str, span: &Range<usize>) -> String {
    let before = text.get(..span.start).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().unwrap_or("").chars().count() + 1;
    format!(":{line}:{column}")
}

/// The algorithms a policy builds, as one value the commands can hand to generic code.
#[derive(Debug, Clone)]
pub enum Limiter {
    FixedWindow(FixedWindow),
    SlidingLog(SlidingLog),
    SlidingCounter(SlidingCounter),
    TokenBucket(TokenBucket),
    LeakyBucket(LeakyBucket),
    Pacing(Pacing),
    /// Not a rate limit: leases, each held for `ttl` ticks.
    Leases {
        model: Concurrency,
        ttl: Ticks,
    },
}

/// Work that runs on any algorithm: [`Limiter::run`] calls it with the concrete one.
pub trait Job {
    type Output;
    fn run<A>(self, algorithm: A) -> Self::Output
    where
        A: Hosted,
        A::State: Debug + Send;
}

impl Limiter {
    /// Runs a rate-limit `job`; a concurrency policy has no rate to run it on.
    pub fn run<J: Job>(&self, job: J, name: &str) -> Result<J::Output, Failure> {
        Ok(match self {
            Self::FixedWindow(a) => job.run(*a),
            Self::SlidingLog(a) => job.run(*a),
            Self::SlidingCounter(a) => job.run(*a),
            Self::TokenBucket(a) => job.run(*a),
            Self::LeakyBucket(a) => job.run(*a),
            Self::Pacing(a) => job.run(*a),
            Self::Leases { .. } => {
                return Err(Failure::Input(format!(
                    "policy {name:?} is a concurrency limit, not a rate: use `tollgate lease acquire|release|renew KEY` and `tollgate inspect KEY`"
                )))
            }
        })
    }

    /// The lease model and ttl of a concurrency policy.
    pub fn leases(&self, name: &str) -> Result<(Concurrency, Ticks), Failure> {
        match *self {
            Self::Leases { model, ttl } => Ok((model, ttl)),
            _ => Err(Failure::Input(format!(
                "policy {name:?} is a rate limit, not a concurrency limit: leases need a policy with algorithm = \"concurrency\", limit and lease"
            ))),
        }
    }
}

/// How parameters are named in messages: as flags or as keys of a policy file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    Flags,
    File,
}

impl Style {
    fn name(self, field: &str) -> String {
        match self {
            Self::Flags => format!("--{field}"),
            Self::File => format!("`{field}`"),
        }
    }
}

/// What is wrong with a policy, and the parameter at fault if it is one.
#[derive(Debug)]
pub struct Problem {
    pub field: Option<&'static str>,
    pub message: String,
}

/// `a`, `a and b`, `a, b and c`.
pub fn list(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

impl Policy {
    /// A policy from `--algorithm` and its parameter flags.
    pub fn from_flags(
        algorithm: Kind,
        limit: Option<u64>,
        capacity: Option<u64>,
        rate: Option<u64>,
        period: Option<Duration>,
    ) -> Self {
        Self {
            algorithm,
            limit,
            capacity,
            rate,
            period,
            lease: None,
            apps: Vec::new(),
            description: String::new(),
            owner: String::new(),
            fleet: None,
        }
    }

    /// The policy's window of time: the period for every algorithm.
    pub fn period(&self) -> Ticks {
        self.period.map_or(0, |p| p.0)
    }

    /// The most units the policy admits at once: the limit or the capacity.
    pub fn limit(&self) -> u64 {
        self.limit.or(self.capacity).unwrap_or(0)
    }

    /// The parameters this algorithm takes, and those it does not.
    fn check_fields(&self, style: Style) -> Result<(), Problem> {
        let kind = self.algorithm.name();
        let wanted = self.algorithm.fields();
        let given = [
            ("limit", self.limit.is_some()),
            ("capacity", self.capacity.is_some()),
            ("rate", self.rate.is_some()),
            ("period", self.period.is_some()),
            ("lease", self.lease.is_some()),
        ];
        let names = |pick: &dyn Fn(&str, bool) -> bool| -> Vec<String> {
            given
                .iter()
                .filter(|&&(name, present)| pick(name, present))
                .map(|(name, _)| style.name(name))
                .collect()
        };
        let missing = names(&|name, present| !present && wanted.contains(&name));
        let extra = names(&|name, present| present && !wanted.contains(&name));
        let takes: Vec<String> = wanted.iter().map(|name| style.name(name)).collect();
        let mut problems = Vec::new();
        if !missing.is_empty() {
            problems.push(format!("{kind} needs {}", list(&missing)));
        }
        if !extra.is_empty() {
            problems.push(format!(
                "{kind} takes {}, not {}",
                list(&takes),
                list(&extra)
            ));
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(Problem {
                field: None,
                message: problems.join("; "),
            })
        }
    }

    /// The algorithm this policy builds, or every missing parameter at once, or the
    /// parameter out of its range in the units it was written in.
    pub fn limiter(&self, style: Style) -> Result<Limiter, Problem> {
        self.check_fields(style)?;
        let period = self.period();
        let (l, c, r) = (
            self.limit.unwrap_or(0),
            self.capacity.unwrap_or(0),
            self.rate.unwrap_or(0),
        );
        let built = match self.algorithm {
            Kind::FixedWindow => FixedWindow::new(l, period).map(Limiter::FixedWindow),
            Kind::SlidingLog => SlidingLog::new(l, period).map(Limiter::SlidingLog),
            Kind::SlidingCounter => SlidingCounter::new(l, period).map(Limiter::SlidingCounter),
            Kind::TokenBucket => TokenBucket::new(c, r, period).map(Limiter::TokenBucket),
            Kind::LeakyBucket => LeakyBucket::new(c, r, period).map(Limiter::LeakyBucket),
            Kind::LeakyPacing => Pacing::new(c, r, period).map(Limiter::Pacing),
            Kind::Concurrency => {
                let ttl = self.lease.map_or(0, |d| d.0);
                Concurrency::new(l)
                    .map_err(|e| match e {
                        // The core calls it `max`; the policy calls it `limit`.
                        ParamError::OutOfRange {
                            value, min, max, ..
                        } => ParamError::OutOfRange {
                            name: "limit",
                            value,
                            min,
                            max,
                        },
                        e => e,
                    })
                    .and_then(|model| {
                        check_lease(ttl)?;
                        Ok(Limiter::Leases { model, ttl })
                    })
            }
        };
        built.map_err(|e| param_problem(&e, style))
    }

    /// Whether `app` may use this policy (seed 000's allow-list).
    pub fn admits_app(&self, app: Option<&str>) -> bool {
        self.apps.is_empty() || app.is_some_and(|app| self.apps.iter().any(|a| a == app))
    }
}

/// A lease's ttl in the core's range: 1 µs to `MAX_PERIOD`.
pub fn check_lease(ttl: Ticks) -> Result<Ticks, ParamError> {
    if (1..=MAX_PERIOD).contains(&ttl) {
        Ok(ttl)
    } else {
        Err(ParamError::OutOfRange {
            name: "lease",
            value: ttl,
            min: 1,
            max: MAX_PERIOD,
        })
    }
}

/// A parameter error in the units the user wrote: durations as durations.
pub fn param_problem(e: &ParamError, style: Style) -> Problem {
    match *e {
        ParamError::OutOfRange {
            name,
            value,
            min,
            max,
        } => {
            let (value, min, max) = if matches!(name, "period" | "lease" | "ttl") {
                (human(value), human(min), human(max))
            } else {
                (value.to_string(), min.to_string(), max.to_string())
            };
            Problem {
                field: Some(name),
                message: format!(
                    "{} must be between {min} and {max}, got {value}",
                    style.name(name)
                ),
            }
        }
        ParamError::HorizonTooLong {
            capacity,
            rate,
            period,
        } => Problem {
            field: Some("capacity"),
            message: format!(
                "a bucket of capacity {capacity} refilled {rate} per {} takes more than 2^53 µs (285 years) to refill; raise {} or lower {}",
                human(period),
                style.name("rate"),
                style.name("capacity")
            ),
        },
        ref other => Problem {
            field: None,
            message: other.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_for_people() {
        assert_eq!(human(0), "0 s");
        assert_eq!(human(1), "1 µs");
        assert_eq!(human(1_500_000), "1.5 s");
        assert_eq!(human(250_000), "250 ms");
        assert_eq!(human(86_400_000_000), "1 day");
        assert_eq!(human(2 * 86_400_000_000), "2 days");
        assert_eq!(human(366 * 86_400_000_000), "366 days");
        assert_eq!(human(59_999_999), "60 s");
        assert!(human(u64::MAX).ends_with(" days"));
        assert_eq!(short(1_000_000), "1s");
        assert_eq!(short(1_500_000), "1500ms");
        assert_eq!(short(0), "0d");
    }
}
