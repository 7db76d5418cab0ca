//! envoyproxy/ratelimit's configuration (their YAML, read as it is) and their descriptor
//! matching, shared by `sluicegate serve --envoy-config` and `sluicegate policy
//! validate`, so a file that validates is a file the service runs.
//!
//! Matching is theirs: a request's descriptor is walked entry by entry down the nested
//! `descriptors`; at each level `key_value` is tried first, then the wildcard values
//! (`*` matches any run of characters) in file order, then the value-less `key`; a rule
//! applies only where the walk ends on the descriptor's last entry. Each matched value
//! keys its own count unless the wildcard `share_threshold`s it.

mod read;
pub(crate) mod yaml;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use sluicegate_core::Kind;

use crate::duration::PolicyDuration;
use crate::file::{FileError, Position};
use crate::model::Policy;

/// Why an envoyproxy/ratelimit configuration is refused; each names the file and, where
/// it can, the line and column (`PATH:LINE:COLUMN: ...`, their service's wording).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EnvoyError {
    /// The file or directory cannot be read.
    #[error(transparent)]
    Read(#[from] FileError),
    /// The text is not a configuration their service would load.
    #[error("{path}{at}: {message}")]
    Invalid {
        /// The file.
        path: String,
        /// Where the value at fault is.
        at: Position,
        /// What is wrong, as their service says it.
        message: String,
    },
    /// Another file defined the domain already (their service refuses it too).
    #[error("{path}: duplicate domain {domain:?} (also in {other_file})")]
    DuplicateDomain {
        /// The file.
        path: String,
        /// The domain.
        domain: String,
        /// The file that defined it first.
        other_file: String,
    },
    /// A rule's full key is one of another domain's (ids join names with dots).
    #[error("{path}: rule {rule:?} of domain {domain:?} has the full key of one of domain {other_domain:?} (in {other_file}): rename one")]
    SharedKey {
        /// The file.
        path: String,
        /// The rule's full key.
        rule: String,
        /// Its domain.
        domain: String,
        /// The domain already holding the key.
        other_domain: String,
        /// The file of that domain.
        other_file: String,
    },
}

/// Their rate limit units, numbered as in their protocol's `RateLimit.Unit` (a week is
/// their later addition).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unit {
    /// 1 s.
    Second = 1,
    /// 60 s.
    Minute = 2,
    /// 3600 s.
    Hour = 3,
    /// 86 400 s.
    Day = 4,
    /// 30 days (theirs).
    Month = 5,
    /// 365 days (theirs).
    Year = 6,
    /// 7 days.
    Week = 7,
}

impl Unit {
    /// The unit numbered `number` in their protocol (`RateLimitUnit`: 1 a second … 7 a
    /// week; 0, unknown, is none).
    pub fn from_number(number: i32) -> Option<Self> {
        Some(match number {
            1 => Self::Second,
            2 => Self::Minute,
            3 => Self::Hour,
            4 => Self::Day,
            5 => Self::Month,
            6 => Self::Year,
            7 => Self::Week,
            _ => return None,
        })
    }

    /// The unit named `name` in any case (`second` … `year`).
    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name.to_ascii_lowercase().as_str() {
            "second" => Self::Second,
            "minute" => Self::Minute,
            "hour" => Self::Hour,
            "day" => Self::Day,
            "week" => Self::Week,
            "month" => Self::Month,
            "year" => Self::Year,
            _ => return None,
        })
    }

    /// Its length in seconds: windows are aligned to multiples of it since the Unix
    /// epoch, as theirs are (unix time divided by the unit).
    pub const fn seconds(self) -> u64 {
        match self {
            Self::Second => 1,
            Self::Minute => 60,
            Self::Hour => 3600,
            Self::Day => 86_400,
            Self::Week => 7 * 86_400,
            Self::Month => 30 * 86_400,
            Self::Year => 365 * 86_400,
        }
    }
}

/// What a matched rule does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Limit {
    /// `unlimited: true`: admitted, never counted.
    Unlimited,
    /// `requests_per_unit` per `unit` (0 denies every request), decided by `algorithm`
    /// (theirs: a fixed window; `sluicegate_algorithm` names another).
    Rate {
        /// Requests admitted per unit.
        requests_per_unit: u32,
        /// The unit.
        unit: Unit,
        /// The algorithm deciding it.
        algorithm: Kind,
    },
}

/// One `rate_limit` block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// Their full key (`domain.key_value.subkey`): names the rule in metrics and
    /// errors, and its limiter.
    pub id: String,
    /// What it does.
    pub limit: Limit,
    /// `shadow_mode`: decided and counted, always admitted.
    pub shadow: bool,
    /// `quota_mode`: over its limit, it refuses a request only if every quota rule the
    /// request matches is over and no other rule is (its status says `OVER_LIMIT`).
    pub quota: bool,
    /// `name`, which another rule's `replaces` may name.
    pub name: Option<String>,
    /// The names of the rules this one drops where both match one request.
    pub replaces: Vec<String>,
    /// `detailed_metric`: counted per matched value in their metrics (kept, unused).
    pub detailed_metric: bool,
}

impl Rule {
    /// The sluicegate policy deciding the rule; none where nothing is counted
    /// (`unlimited`, or 0 requests per unit).
    pub fn policy(&self) -> Option<Policy> {
        let Limit::Rate {
            requests_per_unit,
            unit,
            algorithm,
        } = self.limit
        else {
            return None;
        };
        let n = Some(u64::from(requests_per_unit)).filter(|n| *n > 0)?;
        let period = Some(PolicyDuration(unit.seconds() * 1_000_000));
        Some(match algorithm {
            Kind::TokenBucket | Kind::LeakyBucket | Kind::Pacing => {
                Policy::from_flags(algorithm, None, Some(n), Some(n), period)
            }
            _ => Policy::from_flags(algorithm, Some(n), None, None, period),
        })
    }
}

/// A descriptor of the file: its rule, the descriptors nested under it.
#[derive(Debug, Clone, Default)]
struct Descriptor {
    rule: Option<Rule>,
    children: Level,
    /// `share_threshold`: every value this wildcard matches counts as one.
    share_threshold: bool,
}

/// One list of descriptors, by `key_value` (or `key` for a value-less one).
#[derive(Debug, Clone, Default)]
struct Level {
    by_key: HashMap<String, Descriptor>,
    /// The wildcard `key_value`s in file order, each split on `*`.
    wildcards: Vec<(String, Vec<String>)>,
}

/// One domain: its descriptors and the apps that may ask for it.
#[derive(Debug, Clone)]
pub struct Domain {
    /// The file it was read from.
    pub file: String,
    /// `sluicegate_apps`: the apps that may ask; none listed: every app.
    pub apps: Option<Vec<String>>,
    root: Level,
}

impl Domain {
    /// Whether `app` may ask for this domain.
    pub fn admits_app(&self, app: &str) -> bool {
        self.apps
            .as_ref()
            .is_none_or(|apps| apps.iter().any(|a| a == app))
    }

    /// The rule a descriptor's `entries` (key, value) match, and the key its count is
    /// kept under (wildcard values sharing a threshold written as the pattern).
    pub fn lookup(&self, entries: &[(&str, &str)]) -> Option<(&Rule, String)> {
        let mut level = &self.root;
        let mut rule = None;
        let mut counted: Vec<(&str, &str)> = Vec::with_capacity(entries.len());
        for (i, &(key, value)) in entries.iter().enumerate() {
            let full = format!("{key}_{value}");
            let mut shared = None;
            let next = level
                .by_key
                .get(&full)
                .or_else(|| {
                    let (pattern, _) = level
                        .wildcards
                        .iter()
                        .find(|(_, parts)| wildcard_match(parts, &full))?;
                    let found = level.by_key.get(pattern)?;
                    shared = found
                        .share_threshold
                        .then(|| pattern.strip_prefix(key).and_then(|p| p.strip_prefix('_')))
                        .flatten();
                    Some(found)
                })
                .or_else(|| level.by_key.get(key));
            counted.push((key, shared.unwrap_or(value)));
            let Some(next) = next else { break };
            if i + 1 == entries.len() {
                rule = next.rule.as_ref();
            }
            if next.children.by_key.is_empty() {
                break;
            }
            level = &next.children;
        }
        // A rule is found only on the last entry, so `counted` holds every entry.
        Some((rule?, key_of(counted.into_iter())))
    }

    /// Every rule of the domain.
    pub fn rules(&self) -> Vec<&Rule> {
        let mut rules = Vec::new();
        let mut levels = vec![&self.root];
        while let Some(level) = levels.pop() {
            for descriptor in level.by_key.values() {
                rules.extend(descriptor.rule.as_ref());
                levels.push(&descriptor.children);
            }
        }
        rules
    }
}

/// Whether `value` matches a pattern split on `*` (each `*` any run of characters).
fn wildcard_match(parts: &[String], value: &str) -> bool {
    let [first, middle @ .., last] = parts else {
        return false;
    };
    if parts.len() == 1 {
        return first == value;
    }
    let Some(rest) = value.strip_prefix(first.as_str()) else {
        return false;
    };
    let Some(mut rest) = rest.strip_suffix(last.as_str()) else {
        return false;
    };
    for part in middle {
        match rest.find(part.as_str()) {
            Some(i) => rest = &rest[i + part.len()..],
            None => return false,
        }
    }
    true
}

/// A descriptor's entries as one key: `key=value` joined by `|`, with `\`, `|` and `=`
/// inside a key or value escaped by a `\`, so that no two lists of entries share a key.
pub fn key_of<'a>(entries: impl Iterator<Item = (&'a str, &'a str)>) -> String {
    let mut out = String::new();
    push_key_of(&mut out, entries);
    out
}

/// [`key_of`] appended to `out`.
pub fn push_key_of<'a>(out: &mut String, entries: impl Iterator<Item = (&'a str, &'a str)>) {
    for (i, (key, value)) in entries.enumerate() {
        if i > 0 {
            out.push('|');
        }
        escape(key, out);
        out.push('=');
        escape(value, out);
    }
}

fn escape(text: &str, out: &mut String) {
    for c in text.chars() {
        if matches!(c, '\\' | '|' | '=') {
            out.push('\\');
        }
        out.push(c);
    }
}

/// The domains of a set of files.
#[derive(Debug, Clone, Default)]
pub struct Config {
    domains: BTreeMap<String, Domain>,
}

impl Config {
    /// The domain `name`.
    pub fn domain(&self, name: &str) -> Option<&Domain> {
        self.domains.get(name)
    }

    /// Every domain by name.
    pub fn domains(&self) -> impl Iterator<Item = (&str, &Domain)> {
        self.domains.iter().map(|(name, d)| (name.as_str(), d))
    }

    /// One file's `text`; `path` names it in errors (`PATH:LINE:COLUMN: ...`).
    pub fn parse(path: &str, text: &str) -> Result<Self, EnvoyError> {
        let mut config = Self::default();
        config.add(path, text)?;
        Ok(config)
    }

    /// Adds one file's domain; a domain another file defined already is refused, as
    /// their service does by default.
    pub fn add(&mut self, path: &str, text: &str) -> Result<(), EnvoyError> {
        let (name, domain) = read::domain(path, text)?;
        if let Some(other) = self.domains.get(&name) {
            return Err(EnvoyError::DuplicateDomain {
                path: path.to_owned(),
                domain: name,
                other_file: other.file.clone(),
            });
        }
        // Ids join names with dots: domain `a` with `b.c` and domain `a.b` with `c` would
        // share one limiter.
        for rule in domain.rules() {
            let same =
                |(_, other): &(&String, &Domain)| other.rules().iter().any(|r| r.id == rule.id);
            if let Some((other_name, other)) = self.domains.iter().find(same) {
                return Err(EnvoyError::SharedKey {
                    path: path.to_owned(),
                    rule: rule.id.clone(),
                    domain: name,
                    other_domain: other_name.clone(),
                    other_file: other.file.clone(),
                });
            }
        }
        self.domains.insert(name, domain);
        Ok(())
    }

    /// The file `path`, or every `*.yaml` and `*.yml` file of the directory `path` (as
    /// their service loads a directory), in name order.
    pub fn load(path: &Path) -> Result<Self, EnvoyError> {
        let mut config = Self::default();
        for file in crate::file::listed(path, is_yaml)? {
            let name = file.display().to_string();
            let text = std::fs::read_to_string(&file).map_err(|error| FileError::Read {
                path: name.clone(),
                error,
            })?;
            config.add(&name, &text)?;
        }
        Ok(config)
    }
}

/// Whether `path` names a YAML file (`.yaml`, `.yml`).
pub fn is_yaml(path: &Path) -> bool {
    path.extension()
        .is_some_and(|ext| ext == "yaml" || ext == "yml")
}

#[cfg(test)]
mod tests;
