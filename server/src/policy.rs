//! The policy model: one parser for the policy file (TOML) and the API's policy JSON,
//! durations like `"250ms"`, and the algorithm each policy builds.
//!
//! A policy names an `algorithm` and its parameters, optionally a `ban` around it, and
//! seed 000's metadata (`apps`, `description`, `owner`). `algorithm = "composite"` takes
//! `limits`, a list of member policies decided atomically on one key.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use tollgate_core::limits::MAX_PERIOD;
use tollgate_core::{
    Algorithm, Ban, Composite, Concurrency, Decision, DecodeError, FixedWindow, LeakyBucket,
    Pacing, ParamError, SlidingCounter, SlidingLog, Ticks, TokenBucket,
};

/// The algorithms a policy can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Kind {
    /// [`FixedWindow`]: `limit` per aligned `period`.
    FixedWindow,
    /// [`SlidingLog`]: `limit` in any `period`, exactly.
    SlidingLog,
    /// [`SlidingCounter`]: `limit` per `period`, the two-window estimate.
    SlidingCounter,
    /// [`TokenBucket`]: `capacity`, refilled `rate` per `period`.
    TokenBucket,
    /// [`LeakyBucket`] (the funnel): `capacity`, leaking `rate` per `period`.
    LeakyBucket,
    /// [`Pacing`]: `rate` per `period` exactly spaced, `capacity` waiting.
    LeakyPacing,
    /// Leases: at most `limit` held at once, each for `lease`.
    Concurrency,
    /// Several limits (`limits`) on one key, admitted only if all admit.
    Composite,
}

impl Kind {
    /// Every algorithm, in the order help texts list them.
    pub const ALL: [Self; 8] = [
        Self::FixedWindow,
        Self::SlidingLog,
        Self::SlidingCounter,
        Self::TokenBucket,
        Self::LeakyBucket,
        Self::LeakyPacing,
        Self::Concurrency,
        Self::Composite,
    ];

    /// The name used in files, flags and JSON, e.g. `token-bucket`.
    pub const fn name(self) -> &'static str {
        match self {
            Self::FixedWindow => "fixed-window",
            Self::SlidingLog => "sliding-log",
            Self::SlidingCounter => "sliding-counter",
            Self::TokenBucket => "token-bucket",
            Self::LeakyBucket => "leaky-bucket",
            Self::LeakyPacing => "leaky-pacing",
            Self::Concurrency => "concurrency",
            Self::Composite => "composite",
        }
    }

    /// The parameters each algorithm takes: windows a limit and a period, buckets a
    /// capacity, a rate and a period, leases a limit and a lease, a composite its limits.
    const fn fields(self) -> &'static [&'static str] {
        match self {
            Self::FixedWindow | Self::SlidingLog | Self::SlidingCounter => &["limit", "period"],
            Self::TokenBucket | Self::LeakyBucket | Self::LeakyPacing => {
                &["capacity", "rate", "period"]
            }
            Self::Concurrency => &["limit", "lease"],
            Self::Composite => &["limits"],
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Kind {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|k| k.name() == text)
            .ok_or_else(|| {
                let names: Vec<String> = Self::ALL.iter().map(|k| k.name().to_owned()).collect();
                format!("unknown algorithm {text:?}: use {}", list_or(&names))
            })
    }
}

/// One policy: an algorithm and its parameters, an optional ban, and seed 000's
/// metadata.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    /// The algorithm.
    pub algorithm: Kind,
    /// Windows: units per period. Leases: how many are held at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    /// Buckets: the most units held.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<u64>,
    /// Buckets: units refilled or leaked per period.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<u64>,
    /// Windows and buckets: the period.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub period: Option<Duration>,
    /// Leases: how long one is held unless renewed or released.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<Duration>,
    /// Composite: the member limits (each an algorithm and its parameters only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<Vec<Policy>>,
    /// A penalty box around the limit (not around leases).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ban: Option<BanSpec>,
    /// Applications allowed to use the policy; empty means any (the command line) or
    /// admins only (the service).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub apps: Vec<String>,
    /// What the policy is for.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// Who answers for it (seed 000's metadata; free text).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub owner: String,
    /// How `tollgate fleet` shares it through Redis unless its flags say otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fleet: Option<FleetSettings>,
}

/// `ban = { threshold = 20, window = "1m", duration = "10m" }`: once more than
/// `threshold` units are denied within one aligned `window`, the key is denied outright
/// for `duration`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct BanSpec {
    /// Denied units within one window that trigger a ban (more than this many).
    pub threshold: u64,
    /// The window over which denied units are counted.
    pub window: Duration,
    /// How long a ban lasts.
    pub duration: Duration,
}

/// `fleet = { mode = "prefetch", max_batch = 100, interval = "100ms" }`: the defaults of
/// `tollgate fleet` for a policy (checked by the fleet when it starts, as its flags are).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FleetSettings {
    /// `exact`, `prefetch`, `batch` or `split`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// Prefetch: the most units one take asks for; batch: decisions between settles.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_batch: Option<u64>,
    /// Prefetch: the wait before asking a drained limit again; batch: the longest time
    /// between settles; split: the heartbeat period.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<Duration>,
}

/// A policy file: `[policies.NAME]` tables.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct File {
    /// The policies by name.
    pub policies: BTreeMap<String, Policy>,
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

impl Serialize for Duration {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&short(self.0))
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

/// Reads `"250ms"`: a whole number and one of `us`, `ms`, `s`, `m`, `h`, `d`.
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

/// `a`, `a and b`, `a, b and c`.
pub fn list(items: &[String]) -> String {
    join(items, "and")
}

/// `a`, `a or b`, `a, b or c`.
fn list_or(items: &[String]) -> String {
    join(items, "or")
}

fn join(items: &[String], word: &str) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} {word} {last}", init.join(", ")),
    }
}

/// How parameters are named in messages: as flags or as keys of a policy file (and of
/// the API's JSON).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// `--limit`.
    Flags,
    /// `` `limit` ``.
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

/// What is wrong with a policy, and the parameter at fault if it is one (`limits[1].rate`
/// for a composite's member, `ban.window` for the ban's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The field at fault, as the file names it.
    pub field: Option<String>,
    /// A sentence for people.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl Problem {
    fn whole(message: String) -> Self {
        Self {
            field: None,
            message,
        }
    }

    /// The same problem inside `outer` (`limits[1]`, `ban`).
    fn within(self, outer: &str, style: Style) -> Self {
        Self {
            field: Some(
                self.field
                    .map_or_else(|| outer.to_owned(), |f| format!("{outer}.{f}")),
            ),
            message: format!("{}: {}", style.name(outer), self.message),
        }
    }
}

/// One rate algorithm of the core, chosen at run time.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Rate {
    /// A fixed window.
    FixedWindow(FixedWindow),
    /// A sliding log.
    SlidingLog(SlidingLog),
    /// A sliding window counter.
    SlidingCounter(SlidingCounter),
    /// A token bucket.
    TokenBucket(TokenBucket),
    /// A leaky bucket (meter).
    LeakyBucket(LeakyBucket),
    /// A leaky bucket (queue).
    Pacing(Pacing),
}

/// Any rate limit a policy builds: one algorithm, a composite of several, either one in
/// a ban. One type, so a host keeps one limiter type for every policy.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Rule {
    /// One algorithm.
    Rate(Rate),
    /// One algorithm in a penalty box.
    Ban(Ban<Rate>),
    /// Several algorithms on one key.
    Composite(Composite<Rate>),
    /// Several algorithms on one key, in a penalty box.
    BanComposite(Ban<Composite<Rate>>),
}

/// Implements [`Algorithm`] (and the Redis scripts' trait) for an enum of algorithms by
/// delegating to the variant, with a state enum of the same variants. A state of another
/// variant than the algorithm (impossible unless a host mixes them up) reads as fresh.
macro_rules! dispatch {
    ($enum:ident, $state:ident, $doc:literal { $($var:ident($ty:ty)),* $(,)? }) => {
        #[doc = $doc]
        #[derive(Debug, Clone, PartialEq, Eq)]
        #[allow(missing_docs)]
        pub enum $state {
            $($var(<$ty as Algorithm>::State)),*
        }

        impl Algorithm for $enum {
            type State = $state;

            fn decide(
                &self,
                state: Option<$state>,
                now: Ticks,
                cost: u64,
            ) -> (Decision, Option<$state>) {
                match self {
                    $(Self::$var(a) => {
                        let state = match state {
                            Some($state::$var(s)) => Some(s),
                            _ => None,
                        };
                        let (decision, next) = a.decide(state, now, cost);
                        (decision, next.map($state::$var))
                    })*
                }
            }

            fn peek(&self, state: Option<$state>, now: Ticks, cost: u64) -> Decision {
                match self {
                    $(Self::$var(a) => {
                        let state = match state {
                            Some($state::$var(s)) => Some(s),
                            _ => None,
                        };
                        a.peek(state, now, cost)
                    })*
                }
            }

            fn encode<E: Extend<u8>>(&self, state: &$state, out: &mut E) {
                match (self, state) {
                    $((Self::$var(a), $state::$var(s)) => a.encode(s, out),)*
                    #[allow(unreachable_patterns)]
                    _ => {}
                }
            }

            fn decode(&self, bytes: &[u8]) -> Result<$state, DecodeError> {
                match self {
                    $(Self::$var(a) => a.decode(bytes).map($state::$var),)*
                }
            }
        }

        impl tollgate_redis::LuaAlgorithm for $enum {
            fn lua_files(&self, files: &mut Vec<&'static str>) {
                match self { $(Self::$var(a) => a.lua_files(files),)* }
            }

            fn lua_args(&self, cost: u64, cmd: &mut redis::Cmd) {
                match self { $(Self::$var(a) => a.lua_args(cost, cmd),)* }
            }

            fn module_args(&self, cmd: &mut redis::Cmd) {
                match self { $(Self::$var(a) => a.module_args(cmd),)* }
            }

            fn lua_cost_cap(&self) -> u64 {
                match self { $(Self::$var(a) => a.lua_cost_cap(),)* }
            }

            fn lua_range(&self) -> Result<(), tollgate_redis::Error> {
                match self { $(Self::$var(a) => a.lua_range(),)* }
            }

            fn lua_keys(&self) -> usize {
                match self { $(Self::$var(a) => a.lua_keys(),)* }
            }

            fn lua_fast_arg(
                &self,
                cost: u64,
                now: Option<Ticks>,
                max_wait: Option<Ticks>,
            ) -> Option<Vec<u8>> {
                match self { $(Self::$var(a) => a.lua_fast_arg(cost, now, max_wait),)* }
            }

            fn lua_fast_decision(
                &self,
                relative: u64,
                cost: u64,
                max_wait: Option<Ticks>,
            ) -> Option<Decision> {
                match self {
                    $(Self::$var(a) => a.lua_fast_decision(relative, cost, max_wait),)*
                }
            }

            fn lua_decode(
                &self,
                values: &[Option<Vec<u8>>],
            ) -> Result<Option<$state>, DecodeError> {
                match self {
                    $(Self::$var(a) => Ok(a.lua_decode(values)?.map($state::$var)),)*
                }
            }
        }

        impl tollgate_core::memory::InMemory for $enum {
            type Cell = tollgate_core::memory::LockedCell<$state>;
        }
    };
}

dispatch!(Rate, RateState, "The state of a [`Rate`]." {
    FixedWindow(FixedWindow),
    SlidingLog(SlidingLog),
    SlidingCounter(SlidingCounter),
    TokenBucket(TokenBucket),
    LeakyBucket(LeakyBucket),
    Pacing(Pacing),
});

dispatch!(Rule, RuleState, "The state of a [`Rule`]." {
    Rate(Rate),
    Ban(Ban<Rate>),
    Composite(Composite<Rate>),
    BanComposite(Ban<Composite<Rate>>),
});

/// What a policy builds: a rate limit, or leases.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Built {
    /// A rate limit.
    Rule(Rule),
    /// Not a rate limit: leases, each held for `ttl` ticks.
    Leases {
        /// How many at once.
        model: Concurrency,
        /// How long each lasts.
        ttl: Ticks,
    },
}

/// Composite members at most: each is one more key (on Redis) and one more decision.
pub const MAX_MEMBERS: usize = 16;

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
            limits: None,
            ban: None,
            apps: Vec::new(),
            description: String::new(),
            owner: String::new(),
            fleet: None,
        }
    }

    /// The policy's window of time: the period (a composite's longest).
    pub fn period(&self) -> Ticks {
        match &self.limits {
            Some(members) => members.iter().map(Self::period).max().unwrap_or(0),
            None => self.period.map_or(0, |p| p.0),
        }
    }

    /// The most units the policy admits at once: the limit or the capacity (a
    /// composite's smallest).
    pub fn limit(&self) -> u64 {
        match &self.limits {
            Some(members) => members.iter().map(Self::limit).min().unwrap_or(0),
            None => self.limit.or(self.capacity).unwrap_or(0),
        }
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
            ("limits", self.limits.is_some()),
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
        if self.ban.is_some() && self.algorithm == Kind::Concurrency {
            problems.push(format!("{kind} takes no {}", style.name("ban")));
        }
        if problems.is_empty() {
            Ok(())
        } else {
            // One field at fault is named; several are in the sentence.
            let field = match (missing.as_slice(), extra.as_slice()) {
                ([_], []) => wanted
                    .iter()
                    .zip(wanted.iter().map(|n| style.name(n)))
                    .find(|(_, shown)| missing.contains(shown))
                    .map(|(n, _)| (*n).to_owned()),
                _ => None,
            };
            Err(Problem {
                field,
                message: problems.join("; "),
            })
        }
    }

    /// The algorithm this policy builds, or every missing parameter at once, or the
    /// parameter out of its range in the units it was written in.
    pub fn build(&self, style: Style) -> Result<Built, Problem> {
        self.check_fields(style)?;
        if self.algorithm == Kind::Concurrency {
            let ttl = self.lease.map_or(0, |d| d.0);
            return Concurrency::new(self.limit.unwrap_or(0))
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
                    Ok(Built::Leases { model, ttl })
                })
                .map_err(|e| param_problem(&e, style));
        }
        let rule = if let Some(members) = &self.limits {
            if members.is_empty() || members.len() > MAX_MEMBERS {
                return Err(Problem {
                    field: Some("limits".into()),
                    message: format!(
                        "{} must list 1 to {MAX_MEMBERS} limits, got {}",
                        style.name("limits"),
                        members.len()
                    ),
                });
            }
            let rates = members
                .iter()
                .enumerate()
                .map(|(i, member)| member.member_rate(style, i))
                .collect::<Result<Vec<_>, _>>()?;
            let composite = Composite::new(rates).map_err(|e| param_problem(&e, style))?;
            match self.ban {
                Some(ban) => Rule::BanComposite(ban_of(composite, ban, style)?),
                None => Rule::Composite(composite),
            }
        } else {
            let rate = self.rate(style)?;
            match self.ban {
                Some(ban) => Rule::Ban(ban_of(rate, ban, style)?),
                None => Rule::Rate(rate),
            }
        };
        Ok(Built::Rule(rule))
    }

    /// A composite's member: an algorithm and its parameters, nothing else.
    fn member_rate(&self, style: Style, i: usize) -> Result<Rate, Problem> {
        let at = format!("limits[{i}]");
        let plain = self.ban.is_none()
            && self.apps.is_empty()
            && self.description.is_empty()
            && self.owner.is_empty();
        if !plain || matches!(self.algorithm, Kind::Composite | Kind::Concurrency) {
            return Err(Problem::whole(format!(
                "each of {} is one rate algorithm and its parameters (no composite, concurrency, ban, apps, description or owner)",
                style.name("limits")
            ))
            .within(&at, style));
        }
        self.check_fields(style)
            .and_then(|()| self.rate(style))
            .map_err(|p| p.within(&at, style))
    }

    /// The rate algorithm of a policy whose fields were checked.
    fn rate(&self, style: Style) -> Result<Rate, Problem> {
        let period = self.period.map_or(0, |p| p.0);
        let (l, c, r) = (
            self.limit.unwrap_or(0),
            self.capacity.unwrap_or(0),
            self.rate.unwrap_or(0),
        );
        match self.algorithm {
            Kind::FixedWindow => FixedWindow::new(l, period).map(Rate::FixedWindow),
            Kind::SlidingLog => SlidingLog::new(l, period).map(Rate::SlidingLog),
            Kind::SlidingCounter => SlidingCounter::new(l, period).map(Rate::SlidingCounter),
            Kind::TokenBucket => TokenBucket::new(c, r, period).map(Rate::TokenBucket),
            Kind::LeakyBucket => LeakyBucket::new(c, r, period).map(Rate::LeakyBucket),
            Kind::LeakyPacing => Pacing::new(c, r, period).map(Rate::Pacing),
            Kind::Concurrency | Kind::Composite => {
                return Err(Problem::whole(format!(
                    "{} is not a rate algorithm",
                    self.algorithm
                )))
            }
        }
        .map_err(|e| param_problem(&e, style))
    }

    /// Whether `app` may use this policy (seed 000's allow-list).
    pub fn admits_app(&self, app: Option<&str>) -> bool {
        self.apps.is_empty() || app.is_some_and(|app| self.apps.iter().any(|a| a == app))
    }
}

fn ban_of<A: Algorithm>(inner: A, ban: BanSpec, style: Style) -> Result<Ban<A>, Problem> {
    Ban::new(inner, ban.threshold, ban.window.0, ban.duration.0).map_err(|e| {
        let mut problem = param_problem(&e, style);
        // The core names the ban's own parameters; they live under `ban`.
        if let Some(field) = problem.field.take() {
            problem.field = Some(format!("ban.{field}"));
        }
        problem.message = format!("{}: {}", style.name("ban"), problem.message);
        problem
    })
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
            let (value, min, max) = if matches!(
                name,
                "period" | "lease" | "ttl" | "window" | "duration"
            ) {
                (human(value), human(min), human(max))
            } else {
                (value.to_string(), min.to_string(), max.to_string())
            };
            Problem {
                field: Some(name.to_owned()),
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
            field: Some("capacity".into()),
            message: format!(
                "a bucket of capacity {capacity} refilled {rate} per {} takes more than 2^53 µs (285 years) to refill; raise {} or lower {}",
                human(period),
                style.name("rate"),
                style.name("capacity")
            ),
        },
        ref other => Problem::whole(other.to_string()),
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
