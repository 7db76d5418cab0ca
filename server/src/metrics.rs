//! Counters behind `/metrics` (Prometheus text) and `/v1/stats` (the page's chart).

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use sluicegate_core::{Decision, Outcome};

use crate::key_usage::{escape, TopKeys};

/// Seconds per step of `/v1/stats`.
pub(crate) const STEP_S: u64 = 5;
/// Steps kept: ten minutes.
const STEPS: usize = 120;
/// Upper bounds of the latency histogram, in seconds.
const BUCKETS: [f64; 10] = [
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.05, 0.25,
];

/// One step of a policy's series.
#[derive(Debug, Default)]
struct Step {
    /// Its start in unix seconds (a multiple of [`STEP_S`]).
    start: AtomicU64,
    allowed: AtomicU64,
    denied: AtomicU64,
}

/// One policy's counters: atomics, so counting a decision takes no lock (a lock is
/// taken only to start a new step, once per [`STEP_S`]).
#[derive(Debug)]
pub(crate) struct Counters {
    allowed: AtomicU64,
    denied: AtomicU64,
    /// Admitted in shadow mode, which would have been denied.
    shadow_denied: AtomicU64,
    /// Admissions that left their key near its limit ([`near_limit`]).
    near_limit: AtomicU64,
    /// Units recorded by reports after the work.
    reported: AtomicU64,
    /// Units given back by refunds (reports below the estimate).
    refunded: AtomicU64,
    /// The last ten minutes: the step starting at `s` lives in slot `s / STEP_S % STEPS`.
    steps: [Step; STEPS],
    /// Held while a slot moves to a new step.
    turning: Mutex<()>,
    /// The most used keys, for a policy named by `--key-usage`.
    keys: Option<Mutex<TopKeys>>,
}

impl Default for Counters {
    fn default() -> Self {
        Self {
            allowed: AtomicU64::new(0),
            denied: AtomicU64::new(0),
            shadow_denied: AtomicU64::new(0),
            near_limit: AtomicU64::new(0),
            reported: AtomicU64::new(0),
            refunded: AtomicU64::new(0),
            steps: std::array::from_fn(|_| Step::default()),
            turning: Mutex::new(()),
            keys: None,
        }
    }
}

impl Counters {
    fn slot(&self, step: u64) -> &Step {
        // The remainder is below STEPS: always in range.
        let index = usize::try_from(step / STEP_S % STEPS as u64).unwrap_or_default();
        &self.steps[index]
    }

    fn count(&self, allowed: bool, now_s: u64) {
        let step = now_s - now_s % STEP_S;
        let slot = self.slot(step);
        if slot.start.load(Ordering::Acquire) < step {
            let _one = self.turning.lock().unwrap_or_else(|e| e.into_inner());
            // Zeroed before the new start is published: whoever sees the start counts
            // into a clean slot. (A clock stepping back counts into the newer step.)
            if slot.start.load(Ordering::Acquire) < step {
                slot.allowed.store(0, Ordering::Relaxed);
                slot.denied.store(0, Ordering::Relaxed);
                slot.start.store(step, Ordering::Release);
            }
        }
        let (total, in_step) = if allowed {
            (&self.allowed, &slot.allowed)
        } else {
            (&self.denied, &slot.denied)
        };
        total.fetch_add(1, Ordering::Relaxed);
        in_step.fetch_add(1, Ordering::Relaxed);
    }
}

/// The decision latency histogram: a count per bucket (not cumulative: one atomic
/// added per decision), the sum in nanoseconds and the count.
#[derive(Debug, Default)]
struct Latency {
    /// One per bound of [`BUCKETS`], and one above the last.
    buckets: [AtomicU64; BUCKETS.len() + 1],
    sum_ns: AtomicU64,
    count: AtomicU64,
}

/// An in-process key table's fill (a policy's limiter or lease table), for `/metrics`:
/// a table near its capacity refuses (or, with `on_full = "evict"`, forgets) keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Table {
    /// Keys held now.
    pub keys: usize,
    /// The most keys held at once.
    pub capacity: usize,
    /// Keys forgotten while they still held state.
    pub evicted: u64,
    /// New keys refused because the table was full of keys in use.
    pub refused: u64,
}

/// A metric of key tables: its name, type, help and value.
type TableMetric = (&'static str, &'static str, &'static str, fn(&Table) -> u64);

/// Whether `decision` admitted and left its key at least 80% used, "used" being
/// `(limit - remaining) / limit` (as envoyproxy/ratelimit's `near_limit`: a denial is
/// over the limit, not near it). An admission that left no state to reset (`--fail
/// open` while Redis is away says `remaining` 0 for want of figures) is not near.
fn near_limit(decision: &Decision) -> bool {
    let used = u128::from(decision.limit.saturating_sub(decision.remaining));
    decision.allowed
        && decision.reset_after > 0
        && decision.limit > 0
        && used * 5 >= u128::from(decision.limit) * 4
}

/// A counter of each policy: its name, help and where it is kept.
type PolicyCounter = (&'static str, &'static str, fn(&Counters) -> &AtomicU64);

/// The Prometheus text of the key tables of `tables` (by policy name).
pub(crate) fn render_tables<'a>(tables: impl Iterator<Item = (&'a str, Table)>) -> String {
    let mut tables: Vec<(&str, Table)> = tables.collect();
    tables.sort_unstable_by_key(|&(policy, _)| policy);
    let mut out = String::new();
    let metrics: [TableMetric; 4] = [
        (
            "sluicegate_keys",
            "gauge",
            "Keys held by a policy's in-process table.",
            |t| t.keys as u64,
        ),
        (
            "sluicegate_keys_capacity",
            "gauge",
            "The most keys a policy's in-process table holds.",
            |t| t.capacity as u64,
        ),
        (
            "sluicegate_keys_evicted_total",
            "counter",
            "Keys forgotten while they held state, by policy.",
            |t| t.evicted,
        ),
        (
            "sluicegate_keys_refused_total",
            "counter",
            "New keys refused by a full table, by policy.",
            |t| t.refused,
        ),
    ];
    for (name, kind, help, value) in metrics {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (policy, table) in &tables {
            let policy = escape(policy);
            let _ = writeln!(out, "{name}{{policy=\"{policy}\"}} {}", value(table));
        }
    }
    out
}

/// The server's counters.
#[derive(Debug, Default)]
pub(crate) struct Metrics {
    policies: RwLock<BTreeMap<String, Arc<Counters>>>,
    latency: Latency,
    store_errors: AtomicU64,
    policy_reload_errors: AtomicU64,
    /// The policies whose most used keys are shown (`--key-usage`), and how many keys
    /// each shows (`--key-usage-max`).
    key_usage: (std::collections::BTreeSet<String>, usize),
    /// Figures another part of the server keeps (the quota service's shares).
    others: Others,
}

/// Figures kept by another part of the server, shown in `/metrics` and `/v1/stats`.
pub(crate) trait Shown: Send + Sync {
    /// Its part of `/metrics`.
    fn render(&self) -> String;
    /// Its figures of policy `name`, if it has any.
    fn figures(&self, name: &str) -> Option<serde_json::Value>;
}

/// The parts shown that are kept elsewhere, while they live.
#[derive(Default)]
struct Others(RwLock<Vec<std::sync::Weak<dyn Shown>>>);

impl std::fmt::Debug for Others {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.0.read().map_or(0, |t| t.len());
        write!(f, "Others({n})")
    }
}

impl Others {
    fn live(&self) -> Vec<Arc<dyn Shown>> {
        let others = self.0.read().unwrap_or_else(|e| e.into_inner());
        others.iter().filter_map(std::sync::Weak::upgrade).collect()
    }
}

impl Metrics {
    /// Counters that also keep the `max` most used keys of each policy of `policies`.
    pub(crate) fn with_key_usage(policies: &[String], max: usize) -> Self {
        Self {
            key_usage: (policies.iter().cloned().collect(), max),
            ..Self::default()
        }
    }

    /// The counters of `policy`, made on first use; a decision counts into them with
    /// [`Metrics::decision`], so the map is read only when a limiter is built.
    pub(crate) fn counters(&self, policy: &str) -> Arc<Counters> {
        if let Some(counters) = self
            .policies
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(policy)
        {
            return Arc::clone(counters);
        }
        let mut policies = self.policies.write().unwrap_or_else(|e| e.into_inner());
        let (watched, max) = &self.key_usage;
        Arc::clone(policies.entry(policy.to_owned()).or_insert_with(|| {
            Arc::new(Counters {
                keys: watched
                    .contains(policy)
                    .then(|| Mutex::new(TopKeys::new(*max))),
                ..Counters::default()
            })
        }))
    }

    /// Counts `outcome` of `key` into `counters` at unix second `now_s`, taking
    /// `took`. In shadow mode the request is admitted (and counted so), a denial counted
    /// apart; a fail policy's answer has no figures to count beyond its verdict.
    pub(crate) fn decision(
        &self,
        counters: &Counters,
        key: &str,
        outcome: &Outcome<()>,
        shadow: bool,
        now_s: u64,
        took: Duration,
    ) {
        counters.count(outcome.allowed() || shadow, now_s);
        if shadow && !outcome.allowed() {
            counters.shadow_denied.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(decision) = outcome.decision() {
            if near_limit(decision) {
                counters.near_limit.fetch_add(1, Ordering::Relaxed);
            }
            if let Some(keys) = &counters.keys {
                keys.lock().unwrap_or_else(|e| e.into_inner()).record(
                    key,
                    decision,
                    Instant::now(),
                );
            }
        }
        let seconds = took.as_secs_f64();
        let bucket = BUCKETS
            .iter()
            .position(|&bound| seconds <= bound)
            .unwrap_or(BUCKETS.len());
        if let Some(count) = self.latency.buckets.get(bucket) {
            count.fetch_add(1, Ordering::Relaxed);
        }
        let ns = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        self.latency.sum_ns.fetch_add(ns, Ordering::Relaxed);
        self.latency.count.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts the units a report of `adjustment` recorded into `counters`.
    pub(crate) fn report(&self, counters: &Counters, adjustment: i64, recorded: u64) {
        let counter = if adjustment < 0 {
            &counters.refunded
        } else {
            &counters.reported
        };
        counter.fetch_add(recorded, Ordering::Relaxed);
    }

    /// Counts a store failure.
    pub(crate) fn store_error(&self) {
        self.store_errors.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a change of the policy files refused (an invalid file).
    pub(crate) fn policy_reload_error(&self) {
        self.policy_reload_errors.fetch_add(1, Ordering::Relaxed);
    }

    /// Drops the counters of policies that no longer exist.
    pub(crate) fn retain(&self, exists: impl Fn(&str) -> bool) {
        self.policies
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|name, _| exists(name));
    }

    /// Shows `other`'s figures too, while it lives.
    pub(crate) fn add_shown(&self, other: std::sync::Weak<dyn Shown>) {
        self.others
            .0
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .push(other);
    }

    /// The Prometheus text exposition.
    pub(crate) fn render(&self) -> String {
        let mut out = String::new();
        for other in self.others.live() {
            out.push_str(&other.render());
        }
        // A policy shows once it has decided or reported (its counters exist from its
        // build).
        let policies = self.policies.read().unwrap_or_else(|e| e.into_inner());
        let decided: Vec<(&String, &Arc<Counters>)> = policies
            .iter()
            .filter(|(_, p)| {
                [&p.allowed, &p.denied, &p.reported, &p.refunded]
                    .iter()
                    .any(|c| c.load(Ordering::Relaxed) > 0)
            })
            .collect();
        out.push_str("# HELP sluicegate_decisions_total Decisions by policy and outcome (a shadow policy admits).\n# TYPE sluicegate_decisions_total counter\n");
        // A rule of Envoy's YAML is named by its values, which may hold any character.
        let decided: Vec<(String, &Arc<Counters>)> = decided
            .into_iter()
            .map(|(name, p)| (escape(name), p))
            .collect();
        for (name, p) in &decided {
            for (outcome, count) in [("allowed", &p.allowed), ("denied", &p.denied)] {
                let _ = writeln!(
                    out,
                    "sluicegate_decisions_total{{policy=\"{name}\",outcome=\"{outcome}\"}} {}",
                    count.load(Ordering::Relaxed)
                );
            }
        }
        let per_policy: [PolicyCounter; 4] = [
            (
                "sluicegate_shadow_denied_total",
                "Requests a shadow policy admitted that it would have denied, by policy.",
                |p| &p.shadow_denied,
            ),
            (
                "sluicegate_near_limit_total",
                "Admissions that left their key at least 80% used, by policy.",
                |p| &p.near_limit,
            ),
            (
                "sluicegate_reported_units_total",
                "Units recorded by reports of costs known after the work, by policy.",
                |p| &p.reported,
            ),
            (
                "sluicegate_refunded_units_total",
                "Units given back by reports below their estimate, or refunds, by policy.",
                |p| &p.refunded,
            ),
        ];
        for (metric, help, counter) in per_policy {
            let _ = writeln!(out, "# HELP {metric} {help}\n# TYPE {metric} counter");
            for (name, p) in &decided {
                let _ = writeln!(
                    out,
                    "{metric}{{policy=\"{name}\"}} {}",
                    counter(p).load(Ordering::Relaxed)
                );
            }
        }
        out.push_str("# HELP sluicegate_key_usage_ratio The share of its limit each of a policy's most used keys has taken (policies named by --key-usage).\n# TYPE sluicegate_key_usage_ratio gauge\n");
        for (name, p) in &decided {
            if let Some(keys) = &p.keys {
                keys.lock().unwrap_or_else(|e| e.into_inner()).render(
                    name,
                    Instant::now(),
                    &mut out,
                );
            }
        }
        drop(policies);
        out.push_str("# HELP sluicegate_decision_seconds Time to decide one request.\n# TYPE sluicegate_decision_seconds histogram\n");
        // Read while decisions go on: the buckets, then the count, then the sum, so
        // the cumulative counts never exceed the count shown.
        let mut cumulative = 0;
        for (count, bound) in self.latency.buckets.iter().zip(BUCKETS) {
            cumulative += count.load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "sluicegate_decision_seconds_bucket{{le=\"{bound}\"}} {cumulative}"
            );
        }
        let count = self.latency.count.load(Ordering::Relaxed).max(cumulative);
        let sum = self.latency.sum_ns.load(Ordering::Relaxed) as f64 / 1e9;
        let _ = writeln!(
            out,
            "sluicegate_decision_seconds_bucket{{le=\"+Inf\"}} {count}\nsluicegate_decision_seconds_sum {sum}\nsluicegate_decision_seconds_count {count}"
        );
        let _ = writeln!(
            out,
            "# HELP sluicegate_store_errors_total Failed store operations.\n# TYPE sluicegate_store_errors_total counter\nsluicegate_store_errors_total {}",
            self.store_errors.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "# HELP sluicegate_policy_reload_errors_total Changes of the policy files refused as invalid (the previous policies kept).\n# TYPE sluicegate_policy_reload_errors_total counter\nsluicegate_policy_reload_errors_total {}",
            self.policy_reload_errors.load(Ordering::Relaxed)
        );
        out
    }

    /// `{"t":[…],"allowed":[…],"denied":[…]}` of `policy` over the last ten minutes up to
    /// unix second `now_s`, one entry per step, zeros where nothing was decided; and
    /// `"shares"`, its Envoy quota shares now, if it has subscribers.
    pub(crate) fn series(&self, policy: &str, now_s: u64) -> serde_json::Value {
        let last = now_s - now_s % STEP_S;
        let first = last.saturating_sub(STEP_S * (STEPS as u64 - 1));
        let counters = self
            .policies
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(policy)
            .cloned();
        let (mut t, mut allowed, mut denied) = (Vec::new(), Vec::new(), Vec::new());
        let mut step = first;
        while step <= last {
            let slot = counters
                .as_deref()
                .map(|c| c.slot(step))
                .filter(|slot| slot.start.load(Ordering::Acquire) == step);
            t.push(step);
            allowed.push(slot.map_or(0, |s| s.allowed.load(Ordering::Relaxed)));
            denied.push(slot.map_or(0, |s| s.denied.load(Ordering::Relaxed)));
            step += STEP_S;
        }
        let mut series = serde_json::json!({"t": t, "allowed": allowed, "denied": denied});
        if let Some(shares) = self.others.live().iter().find_map(|o| o.figures(policy)) {
            series["shares"] = shares;
        }
        series
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use sluicegate_core::Outcome;

    use super::{near_limit, Decision, Metrics};

    /// A rule of Envoy's YAML is named by its values: every label value is escaped, so
    /// one odd value cannot make a scraper refuse the whole page.
    #[test]
    fn label_values_are_escaped() {
        let metrics = Metrics::default();
        let counters = metrics.counters("envoy:d.say \"hi\"\\\n");
        let admitted = Outcome::Decided(Decision::admit(1, 0, 0, 0));
        metrics.decision(&counters, "k", &admitted, false, 0, Duration::ZERO);
        let out = metrics.render();
        let line =
            r#"sluicegate_decisions_total{policy="envoy:d.say \"hi\"\\\n",outcome="allowed"} 1"#;
        assert!(out.lines().any(|l| l == line), "{out}");
    }

    #[test]
    fn near_is_an_admission_at_four_fifths_used_with_figures() {
        assert!(near_limit(&Decision::admit(10, 2, 1, 0)));
        assert!(!near_limit(&Decision::admit(10, 3, 1, 0)));
        assert!(near_limit(&Decision::admit(u64::MAX, 0, 1, 0)));
        // Over the limit is not near it; no figures (failing open) is not near either.
        assert!(!near_limit(&Decision::deny(10, 0, Some(1), 1)));
        assert!(!near_limit(&Decision::admit(10, 0, 0, 0)));
        assert!(!near_limit(&Decision::admit(0, 0, 1, 0)));
    }
}
