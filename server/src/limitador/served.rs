//! limitador's limits as served: each limit's window and the prefix of its counters'
//! keys (kept across reloads where its identity is the same, so a change of
//! `max_value` or `name` keeps its counts), and a request decided on them as limitador
//! decides: every limit whose conditions hold applies, its variables name its counter,
//! and the request is admitted on all of them or on none.

use std::collections::HashMap;
use std::sync::Arc;

use sha2::{Digest, Sha256};
use sluicegate_core::{AnchoredWindow, Ticks, SECOND};
use sluicegate_policy::envoy::push_key_of;
use sluicegate_policy::limitador::{Bindings, Config, Limit, Namespace, Values};

use super::counters::{Counter, Counters, Figures, Mode};
use crate::limiters::DecideError;

/// The most descriptors a request may bring.
pub(crate) const MAX_DESCRIPTORS: usize = 64;
/// The most entries one descriptor (or the HTTP API's `values`) may hold.
pub(crate) const MAX_ENTRIES: usize = 64;
/// The longest key or value of an entry, in bytes.
pub(crate) const MAX_ENTRY_LEN: usize = 4096;

/// The limits file served and, by namespace, each limit's window and key prefix.
#[derive(Debug, Default)]
pub(crate) struct Limits {
    pub(crate) config: Config,
    built: HashMap<String, Vec<Built>>,
}

/// A limit's window (`None`: a `max_value` of 0) and the prefix of its counters' keys.
#[derive(Debug, Clone)]
struct Built {
    window: Option<AnchoredWindow>,
    prefix: String,
}

/// The prefix of the keys of `limit`'s counters: its namespace as Redis's hash tag (a
/// request's counters are all of one namespace, so one slot of a Cluster), then a digest
/// of its identity.
fn prefix(limit: &Limit) -> String {
    let digest = Sha256::digest(limit.identity().as_bytes());
    let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    format!("sluicegate:limitador:{{{}}}:{hex}:", limit.namespace)
}

impl Limits {
    /// `config` as served.
    pub(crate) fn build(config: Config) -> Self {
        let built = config
            .namespaces()
            .map(|(name, ns)| {
                let built = ns
                    .limits
                    .iter()
                    .map(|limit| Built {
                        // The file's ranges are the core's: only a max_value of 0 has none.
                        window: AnchoredWindow::new(limit.max_value, limit.seconds * SECOND).ok(),
                        prefix: prefix(limit),
                    })
                    .collect();
                (name.to_owned(), built)
            })
            .collect();
        Self { config, built }
    }

    /// Whether `key` is a counter of a limit served.
    pub(crate) fn keeps(&self, key: &str) -> bool {
        self.built
            .values()
            .flatten()
            .any(|b| key.starts_with(&b.prefix))
    }
}

/// A request to limitador's limits.
#[derive(Debug)]
pub(crate) struct Asked<'a> {
    pub(crate) namespace: &'a str,
    /// Each descriptor's entries in order.
    pub(crate) descriptors: Vec<Vec<(&'a str, &'a str)>>,
    /// Hits (limitador's delta; 0 is taken as 1 by the callers whose protocol says so).
    pub(crate) delta: u64,
    pub(crate) mode: Mode,
    /// The time to decide at (`None`: the store's clock; tests give one).
    pub(crate) now: Option<Ticks>,
}

/// Why a request was not decided; each front end answers it in its own terms.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LimitsError {
    /// No such namespace for the caller.
    #[error("{0}")]
    NotFound(String),
    /// The request is out of bounds.
    #[error("{0}")]
    Invalid(String),
    /// An expression failed on the request (limitador: `UNAVAILABLE`), or the counters'
    /// store did.
    #[error("{0}")]
    Unavailable(String),
}

impl From<DecideError> for LimitsError {
    fn from(e: DecideError) -> Self {
        Self::Unavailable(e.to_string())
    }
}

/// One counter the request applied to: its limit and its figures after the call.
#[derive(Debug, Clone)]
pub(crate) struct Applied {
    pub(crate) limit: Arc<Limit>,
    pub(crate) figures: Figures,
    /// Its variables' values (text to value), as listed (a decision leaves them empty:
    /// no answer shows them).
    pub(crate) variables: Vec<(String, String)>,
}

/// What a request got.
#[derive(Debug, Clone)]
pub(crate) struct Answer {
    pub(crate) admitted: bool,
    pub(crate) counters: Vec<Applied>,
}

/// Checks a request's size before any expression sees it.
fn check_bounds(asked: &Asked) -> Result<(), LimitsError> {
    if asked.descriptors.len() > MAX_DESCRIPTORS {
        return Err(LimitsError::Invalid(format!(
            "a request has at most {MAX_DESCRIPTORS} descriptors"
        )));
    }
    for entries in &asked.descriptors {
        if entries.len() > MAX_ENTRIES {
            return Err(LimitsError::Invalid(format!(
                "a descriptor has at most {MAX_ENTRIES} entries"
            )));
        }
        if entries
            .iter()
            .any(|(k, v)| k.len() > MAX_ENTRY_LEN || v.len() > MAX_ENTRY_LEN)
        {
            return Err(LimitsError::Invalid(format!(
                "a descriptor's keys and values are at most {MAX_ENTRY_LEN} bytes"
            )));
        }
    }
    Ok(())
}

impl Limits {
    /// Decides `asked` on `ns` (its namespace's limits), keeping counts in `counters`.
    pub(crate) async fn decide(
        &self,
        ns: &Namespace,
        counters: &dyn Counters,
        asked: &Asked<'_>,
    ) -> Result<Answer, LimitsError> {
        check_bounds(asked)?;
        let built = self
            .built
            .get(asked.namespace)
            .ok_or_else(|| LimitsError::Invalid("no such namespace".into()))?;
        let mut bindings = Bindings::of(&asked.descriptors);
        let applying = ns
            .applying(&mut bindings)
            .map_err(|e| LimitsError::Unavailable(e.0))?;
        let keyed: Vec<Counter> = applying
            .iter()
            .map(|(i, values)| Counter {
                key: counter_key(&built[*i].prefix, values),
                window: built[*i].window,
            })
            .collect();
        if keyed.is_empty() {
            return Ok(Answer {
                admitted: true,
                counters: Vec::new(),
            });
        }
        let counted = counters
            .apply(&keyed, asked.delta, asked.mode, asked.now)
            .await?;
        let counters = applying
            .into_iter()
            .zip(counted.figures)
            .map(|((i, _), figures)| Applied {
                limit: Arc::clone(&ns.limits[i]),
                figures,
                variables: Vec::new(),
            })
            .collect();
        Ok(Answer {
            admitted: counted.admitted,
            counters,
        })
    }
}

/// The key of the counter of `values` under `prefix`, in one allocation.
fn counter_key(prefix: &str, values: &Values) -> String {
    let len = values.iter().map(|(k, v)| k.len() + v.len() + 2);
    let mut key = String::with_capacity(prefix.len() + len.sum::<usize>());
    key.push_str(prefix);
    push_key_of(&mut key, values.iter().map(|(k, v)| (*k, v.as_ref())));
    key
}

impl Answer {
    /// The first counter that had no room for `delta` (limitador's `limit_name` is
    /// its limit's).
    pub(crate) fn limited_by(&self, delta: u64) -> Option<&Applied> {
        self.counters.iter().find(|c| c.figures.remaining < delta)
    }

    /// limitador's `DRAFT_VERSION_03` headers: the most restrictive counter's limit,
    /// then every counter as `max;w=seconds[;name="…"]`, its remaining and its reset.
    pub(crate) fn headers(&self) -> Vec<(&'static str, String)> {
        let mut sorted: Vec<&Applied> = self.counters.iter().collect();
        sorted.sort_by_key(|c| c.figures.remaining);
        let Some(first) = sorted.first() else {
            return Vec::new();
        };
        let mut limit = first.limit.max_value.to_string();
        for c in &sorted {
            limit.push_str(&format!(", {};w={}", c.limit.max_value, c.limit.seconds));
            if let Some(name) = &c.limit.name {
                limit.push_str(&format!(";name=\"{}\"", name.replace('"', "'")));
            }
        }
        vec![
            ("X-RateLimit-Limit", limit),
            ("X-RateLimit-Remaining", first.figures.remaining.to_string()),
            (
                "X-RateLimit-Reset",
                (first.figures.expires_in / SECOND).to_string(),
            ),
        ]
    }
}

/// The entries a key written by [`push_key_of`] names (`\` escapes the next character).
fn entries_of(key: &str) -> Vec<(String, String)> {
    let mut entries = Vec::new();
    if key.is_empty() {
        return entries;
    }
    let (mut name, mut text, mut chars) = (None, String::new(), key.chars());
    while let Some(c) = chars.next() {
        match c {
            '\\' => text.extend(chars.next()),
            '=' if name.is_none() => name = Some(std::mem::take(&mut text)),
            '|' => entries.push((name.take().unwrap_or_default(), std::mem::take(&mut text))),
            c => text.push(c),
        }
    }
    entries.push((name.unwrap_or_default(), text));
    entries
}

impl Limits {
    /// The live counters of the namespace `name` (at most `max`), as limitador's
    /// `/counters` lists them: each with its limit and figures.
    pub(crate) async fn counters_of(
        &self,
        name: &str,
        ns: &Namespace,
        counters: &dyn Counters,
        max: usize,
    ) -> Result<Vec<Applied>, LimitsError> {
        let mut listed = Vec::new();
        for (limit, built) in ns
            .limits
            .iter()
            .zip(self.built.get(name).into_iter().flatten())
        {
            let left = max.saturating_sub(listed.len());
            for (key, count, expires_in) in counters.list(&built.prefix, left).await? {
                let variables = entries_of(key.strip_prefix(&built.prefix).unwrap_or_default());
                let figures = Figures {
                    remaining: limit.max_value.saturating_sub(count),
                    expires_in,
                };
                listed.push(Applied {
                    limit: Arc::clone(limit),
                    figures,
                    variables,
                });
            }
        }
        Ok(listed)
    }
}

#[cfg(test)]
mod tests {
    use super::entries_of;
    use sluicegate_policy::envoy::key_of;

    #[test]
    fn keys_name_their_entries() {
        let entries = [("descriptors[0][\"a=b\"]", "x|y\\z"), ("v", "")];
        assert_eq!(
            entries_of(&key_of(entries.into_iter())),
            entries.map(|(k, v)| (k.to_owned(), v.to_owned()))
        );
    }
}
