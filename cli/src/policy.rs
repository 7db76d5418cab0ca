//! Policies from TOML, durations like "250ms", and the algorithm each one builds.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::ops::Range;

use crate::backend::Hosted;
use serde::Deserialize;
use tollgate_core::{
    FixedWindow, LeakyBucket, Pacing, ParamError, SlidingCounter, SlidingLog, Ticks, TokenBucket,
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
}

impl Kind {
    /// The name used in files and flags, e.g. `token-bucket`.
    pub fn name(self) -> String {
        clap::ValueEnum::to_possible_value(&self)
            .map(|v| v.get_name().to_owned())
            .unwrap_or_default()
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
    pub period: Duration,
    /// Applications allowed to use the policy; empty means any.
    #[serde(default)]
    pub apps: Vec<String>,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub owner: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    policies: BTreeMap<String, toml::Spanned<Policy>>,
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

pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let scale: Ticks = match unit {
        "us" => 1,
        "ms" => 1_000,
        "s" => 1_000_000,
        "m" => 60_000_000,
        "h" => 3_600_000_000,
        "d" => 86_400_000_000,
        _ => {
            return Err(format!(
                "bad duration {text:?}: use a whole number with us, ms, s, m, h or d"
            ))
        }
    };
    number
        .parse::<Ticks>()
        .ok()
        .and_then(|n| n.checked_mul(scale))
        .map(Duration)
        .ok_or_else(|| {
            format!("bad duration {text:?}: use a whole number with us, ms, s, m, h or d")
        })
}

/// Reads the policy `name` from the TOML file at `path`, and builds its limiter.
pub fn load(path: &str, name: &str) -> Result<(Policy, Limiter), Failure> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Failure::Input(format!("cannot read {path}: {e}")))?;
    let file: File = toml::from_str(&text).map_err(|e| {
        let at = e
            .span()
            .map(|span| line_of(&text, span))
            .unwrap_or_default();
        Failure::Input(format!("{path}{at}: {}", e.message()))
    })?;
    let spanned = file.policies.get(name).ok_or_else(|| {
        let known: Vec<&str> = file.policies.keys().map(String::as_str).collect();
        Failure::Input(format!(
            "{path}: no policy {name:?} (it has: {})",
            known.join(", ")
        ))
    })?;
    let policy = spanned.get_ref().clone();
    // A bad parameter is reported with the policy's line.
    let limiter = policy.limiter().map_err(|e| {
        Failure::Input(format!(
            "{path}{}: policy {name:?}: {e}",
            line_of(&text, spanned.span())
        ))
    })?;
    Ok((policy, limiter))
}

fn line_of(text: &str, span: Range<usize>) -> String {
    let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
    format!(":{line}")
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
    pub fn run<J: Job>(&self, job: J) -> J::Output {
        match self {
            Self::FixedWindow(a) => job.run(*a),
            Self::SlidingLog(a) => job.run(*a),
            Self::SlidingCounter(a) => job.run(*a),
            Self::TokenBucket(a) => job.run(*a),
            Self::LeakyBucket(a) => job.run(*a),
            Self::Pacing(a) => job.run(*a),
        }
    }
}

impl Policy {
    /// A policy from `--algorithm` and its parameter flags, and its limiter.
    pub fn from_flags(
        algorithm: Kind,
        limit: Option<u64>,
        capacity: Option<u64>,
        rate: Option<u64>,
        period: Duration,
    ) -> Result<(Self, Limiter), Failure> {
        let policy = Self {
            algorithm,
            limit,
            capacity,
            rate,
            period,
            apps: Vec::new(),
            description: String::new(),
            owner: String::new(),
        };
        let limiter = policy.limiter()?;
        Ok((policy, limiter))
    }

    /// The policy's window of time: the period for every algorithm.
    pub const fn period(&self) -> Ticks {
        self.period.0
    }

    pub fn limiter(&self) -> Result<Limiter, String> {
        let period = self.period.0;
        let need = |value: Option<u64>, name: &str| {
            value.ok_or_else(|| format!("{} needs `{name}`", self.algorithm.name()))
        };
        let window = || -> Result<u64, String> {
            if self.capacity.is_some() || self.rate.is_some() {
                return Err(format!(
                    "{} takes `limit` and `period`, not `capacity` or `rate`",
                    self.algorithm.name()
                ));
            }
            need(self.limit, "limit")
        };
        let bucket = || -> Result<(u64, u64), String> {
            if self.limit.is_some() {
                return Err(format!(
                    "{} takes `capacity`, `rate` and `period`, not `limit`",
                    self.algorithm.name()
                ));
            }
            Ok((need(self.capacity, "capacity")?, need(self.rate, "rate")?))
        };
        let param = |e: ParamError| e.to_string();
        Ok(match self.algorithm {
            Kind::FixedWindow => {
                Limiter::FixedWindow(FixedWindow::new(window()?, period).map_err(param)?)
            }
            Kind::SlidingLog => {
                Limiter::SlidingLog(SlidingLog::new(window()?, period).map_err(param)?)
            }
            Kind::SlidingCounter => {
                Limiter::SlidingCounter(SlidingCounter::new(window()?, period).map_err(param)?)
            }
            Kind::TokenBucket => {
                let (c, r) = bucket()?;
                Limiter::TokenBucket(TokenBucket::new(c, r, period).map_err(param)?)
            }
            Kind::LeakyBucket => {
                let (c, r) = bucket()?;
                Limiter::LeakyBucket(LeakyBucket::new(c, r, period).map_err(param)?)
            }
            Kind::LeakyPacing => {
                let (c, r) = bucket()?;
                Limiter::Pacing(Pacing::new(c, r, period).map_err(param)?)
            }
        })
    }

    /// Whether `app` may use this policy (seed 000's allow-list).
    pub fn admits_app(&self, app: Option<&str>) -> bool {
        self.apps.is_empty() || app.is_some_and(|app| self.apps.iter().any(|a| a == app))
    }
}
