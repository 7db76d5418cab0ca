//! The policy schema: one model for policy files (TOML), the command line's flags and the
//! service's JSON.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sluicegate_core::calendar::Calendar;
use sluicegate_core::memory::OnFull;
use sluicegate_core::{FleetMode, Kind, Ticks};

use crate::duration::{human, PolicyDuration};

const DAY: Ticks = 86_400 * sluicegate_core::SECOND;

/// One policy: an algorithm and its parameters, an optional ban, and its metadata (the
/// apps that may use it, what it is for, who answers for it).
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
    pub period: Option<PolicyDuration>,
    /// Leases: how long one is held unless renewed or released.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<PolicyDuration>,
    /// Leases: the longest `ttl` a caller may ask for (default `lease`): one app cannot
    /// hold a key of a shared table for longer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_lease: Option<PolicyDuration>,
    /// Leases: grant in the order callers asked, a refused caller keeping a place in
    /// the key's queue while it asks again (see the guide's lock family).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fair: bool,
    /// Calendar windows: `day`, `week` (ISO, from Monday) or `month`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calendar: Option<String>,
    /// Calendar windows: the IANA time zone of the calendar (default UTC).
    #[serde(
        default,
        rename = "time-zone",
        alias = "time_zone",
        skip_serializing_if = "Option::is_none"
    )]
    pub time_zone: Option<String>,
    /// Algorithms that take reported costs: the most units a report may take a key
    /// beyond its limit (default 0: never below zero).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overdraft: Option<u64>,
    /// Composite: the member limits (each an algorithm and its parameters only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<Vec<Policy>>,
    /// A penalty box around the limit (not around leases).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ban: Option<BanSpec>,
    /// Rate limits kept in this process: what a full key table does when every key it
    /// could forget would still refuse a request (`deny-new`, the default, or `evict`).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "crate::on_full"
    )]
    pub on_full: Option<OnFull>,
    /// Applications allowed to use the policy: only those listed (none: only its admins,
    /// and the command line run without `--app`). See [`Policy::admits_app`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub apps: Vec<String>,
    /// What the policy is for.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// Who answers for it (free text).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub owner: String,
    /// How `sluicegate fleet` shares it through Redis unless its flags say otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fleet: Option<FleetSettings>,
    /// Shadow mode (rate limits): decide and count as if enforcing, but admit every
    /// request, reporting what would have been denied; a limit is tried on live
    /// traffic before it refuses anyone.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub shadow: bool,
    /// A CEL condition over the request's descriptors (see [`Selector`]): the policy
    /// counts only the requests for which it holds.
    ///
    /// [`Selector`]: crate::Selector
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when: Option<String>,
    /// A CEL expression over the request's descriptors whose value names the counter
    /// in place of the request's key; a key it reads that is missing: not counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
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
    pub window: PolicyDuration,
    /// How long a ban lasts.
    pub duration: PolicyDuration,
}

/// `fleet = { mode = "prefetch", max_batch = 100, interval = "100ms" }`: the defaults of
/// `sluicegate fleet` for a policy (checked by the fleet when it starts, as its flags are).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FleetSettings {
    /// How the fleet shares the limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<FleetMode>,
    /// Prefetch: the most units one take asks for; batch: decisions between settles.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_batch: Option<u64>,
    /// Prefetch: the wait before asking a drained limit again; batch: the longest time
    /// between settles; split: the heartbeat period.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<PolicyDuration>,
}

/// Fields the service stores beside a policy (its name, version, authors and times, and
/// the file it is read from, if any): a client never sets them, and comparing a stored
/// policy with a file leaves them out.
pub const STORED_FIELDS: [&str; 7] = [
    "name",
    "version",
    "created_by",
    "updated_by",
    "created_at",
    "updated_at",
    "file",
];

/// A policy file: `[policies.NAME]` tables.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyFile {
    /// The policies by name.
    pub policies: BTreeMap<String, Policy>,
}

impl Policy {
    /// A policy from `--algorithm` and its parameter flags.
    pub fn from_flags(
        algorithm: Kind,
        limit: Option<u64>,
        capacity: Option<u64>,
        rate: Option<u64>,
        period: Option<PolicyDuration>,
    ) -> Self {
        Self {
            algorithm,
            limit,
            capacity,
            rate,
            period,
            calendar: None,
            time_zone: None,
            overdraft: None,
            lease: None,
            max_lease: None,
            fair: false,
            limits: None,
            ban: None,
            on_full: None,
            apps: Vec::new(),
            description: String::new(),
            owner: String::new(),
            fleet: None,
            shadow: false,
            when: None,
            key: None,
        }
    }

    /// The policy's window of time, what a host keeps a state for: the period (a
    /// composite's longest; a calendar's longest day, week or month).
    pub fn period(&self) -> Ticks {
        self.period_with(Calendar::longest)
    }

    /// The period a person reads and a chart bins by: as [`period`](Self::period), but a
    /// calendar's usual day, week or month (24 hours, 7 days, 30 days).
    pub fn usual_period(&self) -> Ticks {
        self.period_with(|calendar| match calendar {
            Calendar::Day => DAY,
            Calendar::Week => 7 * DAY,
            Calendar::Month => 30 * DAY,
            longer => longer.longest(),
        })
    }

    /// The period as a sentence names it: `1 h`, or `calendar day` for a calendar window.
    pub fn period_words(&self) -> String {
        match (&self.calendar, self.period, &self.limits) {
            (Some(calendar), None, None) => format!("calendar {calendar}"),
            _ => human(self.usual_period()),
        }
    }

    fn period_with(&self, calendar_length: fn(Calendar) -> Ticks) -> Ticks {
        let calendar = || {
            let calendar = self.calendar.as_deref().and_then(Calendar::from_name);
            calendar.map_or(0, calendar_length)
        };
        match &self.limits {
            Some(members) => members
                .iter()
                .map(|member| member.period_with(calendar_length))
                .max()
                .unwrap_or(0),
            None => self.period.map_or_else(calendar, |p| p.0),
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

    /// Leases: the longest ttl a caller may ask for (`max_lease`, else `lease`).
    pub fn max_lease(&self) -> Ticks {
        self.max_lease.or(self.lease).map_or(0, |d| d.0)
    }

    /// Whether `app` may use this policy: only the apps it lists may (none listed: no
    /// app, only its admins see it).
    pub fn admits_app(&self, app: &str) -> bool {
        self.apps.iter().any(|a| a == app)
    }
}
