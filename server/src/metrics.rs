//! Counters behind `/metrics` (Prometheus text) and `/v1/stats` (the page's chart).

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// Seconds per step of `/v1/stats`.
pub const STEP_S: u64 = 5;
/// Steps kept: ten minutes.
const STEPS: usize = 120;
/// Upper bounds of the latency histogram, in seconds.
const BUCKETS: [f64; 10] = [
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.05, 0.25,
];

#[derive(Debug, Default)]
struct PerPolicy {
    allowed: u64,
    denied: u64,
    /// (step start in unix seconds, allowed, denied), oldest first.
    steps: VecDeque<(u64, u64, u64)>,
}

/// The server's counters.
#[derive(Debug, Default)]
pub struct Metrics {
    policies: Mutex<BTreeMap<String, PerPolicy>>,
    latency: Mutex<([u64; BUCKETS.len()], u64, f64)>,
    store_errors: AtomicU64,
}

impl Metrics {
    /// Counts a decision of `policy` at unix second `now_s`, taking `took`.
    pub fn decision(&self, policy: &str, allowed: bool, now_s: u64, took: Duration) {
        {
            let mut policies = self.policies.lock().unwrap_or_else(|e| e.into_inner());
            let entry = match policies.get_mut(policy) {
                Some(entry) => entry,
                None => policies.entry(policy.to_owned()).or_default(),
            };
            let step = now_s - now_s % STEP_S;
            if entry.steps.back().is_none_or(|s| s.0 != step) {
                entry.steps.push_back((step, 0, 0));
                while entry.steps.len() > STEPS {
                    entry.steps.pop_front();
                }
            }
            if let Some(last) = entry.steps.back_mut() {
                if allowed {
                    last.1 += 1;
                } else {
                    last.2 += 1;
                }
            }
            if allowed {
                entry.allowed += 1;
            } else {
                entry.denied += 1;
            }
        }
        let seconds = took.as_secs_f64();
        let mut latency = self.latency.lock().unwrap_or_else(|e| e.into_inner());
        for (count, bound) in latency.0.iter_mut().zip(BUCKETS) {
            if seconds <= bound {
                *count += 1;
            }
        }
        latency.1 += 1;
        latency.2 += seconds;
    }

    /// Counts a store failure.
    pub fn store_error(&self) {
        self.store_errors.fetch_add(1, Ordering::Relaxed);
    }

    /// Drops the counters of policies that no longer exist.
    pub fn retain(&self, exists: impl Fn(&str) -> bool) {
        self.policies
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|name, _| exists(name));
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        out.push_str("# HELP tollgate_decisions_total Decisions by policy and outcome.\n# TYPE tollgate_decisions_total counter\n");
        for (name, p) in self
            .policies
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            // Policy names are letters, digits, `-`, `_` and `.`: nothing to escape.
            let _ = writeln!(
                out,
                "tollgate_decisions_total{{policy=\"{name}\",outcome=\"allowed\"}} {}",
                p.allowed
            );
            let _ = writeln!(
                out,
                "tollgate_decisions_total{{policy=\"{name}\",outcome=\"denied\"}} {}",
                p.denied
            );
        }
        out.push_str("# HELP tollgate_decision_seconds Time to decide one request.\n# TYPE tollgate_decision_seconds histogram\n");
        let latency = *self.latency.lock().unwrap_or_else(|e| e.into_inner());
        for (count, bound) in latency.0.iter().zip(BUCKETS) {
            let _ = writeln!(
                out,
                "tollgate_decision_seconds_bucket{{le=\"{bound}\"}} {count}"
            );
        }
        let _ = writeln!(
            out,
            "tollgate_decision_seconds_bucket{{le=\"+Inf\"}} {}\ntollgate_decision_seconds_sum {}\ntollgate_decision_seconds_count {}",
            latency.1, latency.2, latency.1
        );
        let _ = writeln!(
            out,
            "# HELP tollgate_store_errors_total Failed store operations.\n# TYPE tollgate_store_errors_total counter\ntollgate_store_errors_total {}",
            self.store_errors.load(Ordering::Relaxed)
        );
        out
    }

    /// `{"t":[…],"allowed":[…],"denied":[…]}` of `policy` over the last ten minutes up to
    /// unix second `now_s`, one entry per step, zeros where nothing was decided.
    pub fn series(&self, policy: &str, now_s: u64) -> serde_json::Value {
        let last = now_s - now_s % STEP_S;
        let first = last.saturating_sub(STEP_S * (STEPS as u64 - 1));
        let policies = self.policies.lock().unwrap_or_else(|e| e.into_inner());
        let steps = policies.get(policy).map(|p| &p.steps);
        let (mut t, mut allowed, mut denied) = (Vec::new(), Vec::new(), Vec::new());
        let mut step = first;
        while step <= last {
            let found = steps.and_then(|s| s.iter().find(|x| x.0 == step));
            t.push(step);
            allowed.push(found.map_or(0, |x| x.1));
            denied.push(found.map_or(0, |x| x.2));
            step += STEP_S;
        }
        serde_json::json!({"t": t, "allowed": allowed, "denied": denied})
    }
}
