//! limitador's metrics under its own names, so its dashboards keep working:
//! `authorized_calls` and `authorized_hits` by `limitador_namespace`, `limited_calls`
//! by namespace and `limit_name`, and `counter_latency` (seconds, a histogram). Their
//! labels come from the limits file alone, so their series are bounded by it.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use super::counters::Mode;
use super::served::{Answer, Asked};
use crate::key_usage::escape;

/// `counter_latency`'s bucket bounds, in seconds.
const BUCKETS: [f64; 8] = [0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0];

/// The counts, by namespace (and limit name).
#[derive(Debug, Default)]
pub(crate) struct Calls {
    counts: Mutex<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    authorized_calls: BTreeMap<String, u64>,
    authorized_hits: BTreeMap<String, u64>,
    limited_calls: BTreeMap<(String, String), u64>,
    /// Observations at or below each bucket, their sum and count.
    latency_buckets: [u64; BUCKETS.len()],
    latency_sum: f64,
    latency_count: u64,
}

/// Adds `n` to `key`'s count, copying the key only the first time.
fn bump(map: &mut BTreeMap<String, u64>, key: &str, n: u64) {
    match map.get_mut(key) {
        Some(count) => *count += n,
        None => {
            map.insert(key.to_owned(), n);
        }
    }
}

impl Calls {
    /// Counts one decided call of `asked` that got `answer`, its counters taking `took`.
    pub(crate) fn record(&self, asked: &Asked, answer: &Answer, took: Duration) {
        let mut counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        let ns = asked.namespace;
        if answer.admitted {
            if asked.mode != Mode::Update {
                bump(&mut counts.authorized_calls, ns, 1);
            }
            if asked.mode != Mode::Check {
                bump(&mut counts.authorized_hits, ns, asked.delta);
            }
        } else {
            let ns = ns.to_owned();
            let name = answer
                .limited_by(asked.delta)
                .and_then(|c| c.limit.name.clone())
                .unwrap_or_default();
            *counts.limited_calls.entry((ns, name)).or_default() += 1;
        }
        if !answer.counters.is_empty() {
            let seconds = took.as_secs_f64();
            for (i, bound) in BUCKETS.iter().enumerate() {
                counts.latency_buckets[i] += u64::from(seconds <= *bound);
            }
            counts.latency_sum += seconds;
            counts.latency_count += 1;
        }
    }

    /// The Prometheus text exposition.
    fn exposition(&self) -> String {
        let counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        let mut out = String::new();
        let mut family = |name: &str, help: &str, rows: Vec<(String, u64)>| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
            for (labels, value) in rows {
                let _ = writeln!(out, "{name}{{{labels}}} {value}");
            }
        };
        let by_ns = |map: &BTreeMap<String, u64>| {
            map.iter()
                .map(|(ns, n)| (format!("limitador_namespace=\"{}\"", escape(ns)), *n))
                .collect()
        };
        family(
            "authorized_calls",
            "Authorized calls",
            by_ns(&counts.authorized_calls),
        );
        family(
            "authorized_hits",
            "Authorized hits",
            by_ns(&counts.authorized_hits),
        );
        let limited = counts
            .limited_calls
            .iter()
            .map(|((ns, name), n)| {
                let labels = format!(
                    "limitador_namespace=\"{}\",limit_name=\"{}\"",
                    escape(ns),
                    escape(name)
                );
                (labels, *n)
            })
            .collect();
        family("limited_calls", "Limited calls", limited);
        let _ = writeln!(
            out,
            "# HELP counter_latency Time to decide a call's counters\n# TYPE counter_latency histogram"
        );
        for (bound, n) in BUCKETS.iter().zip(counts.latency_buckets) {
            let _ = writeln!(out, "counter_latency_bucket{{le=\"{bound}\"}} {n}");
        }
        let total = counts.latency_count;
        let _ = writeln!(out, "counter_latency_bucket{{le=\"+Inf\"}} {total}");
        let _ = writeln!(out, "counter_latency_sum {}", counts.latency_sum);
        let _ = writeln!(out, "counter_latency_count {total}");
        out
    }
}

impl crate::metrics::Shown for Calls {
    fn render(&self) -> String {
        self.exposition()
    }

    fn figures(&self, _: &str) -> Option<serde_json::Value> {
        None
    }
}
