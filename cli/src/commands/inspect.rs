//! `sluicegate inspect KEY`: a stored state in the policy's units; for a concurrency
//! policy, its holders.

use std::process::ExitCode;

use clap::Args;
use serde::Serialize;
use sluicegate_core::{Clock, Decision, MonotonicClock, Ticks};

use crate::args::KeyArgs;
use crate::failure::Failure;
#[cfg(any(feature = "sled", feature = "redis"))]
use crate::leasing;
use crate::output::{hex, show};
use crate::rates::Rates;
use sluicegate_policy::{human, Kind, Policy};

#[derive(Debug, Args)]
pub struct InspectArgs {
    #[command(flatten)]
    key: KeyArgs,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

pub fn run(args: InspectArgs) -> Result<ExitCode, Failure> {
    let InspectArgs { key: args, json } = args;
    let (loaded, open) = args.load(false)?;
    #[cfg(any(feature = "sled", feature = "redis"))]
    if let sluicegate_policy::Built::Leases { model, .. } = loaded.built {
        return leasing::inspect(leasing::Inspect {
            key: &args.key,
            model,
            algorithm: sluicegate_core::Kind::Concurrency.name(),
            open,
            now: args.now,
            json,
        });
    }
    let rates = Rates::open(&loaded, &open)?;
    let now = args.now.unwrap_or_else(|| MonotonicClock::new().now());
    let (bytes, decision) = rates.stored(&args.key, now)?;
    let view = View::new(
        &loaded.policy,
        &args.key,
        &format!("{}{}", open.namespace, args.key),
        bytes,
        &decision,
        now,
    );
    show(json, &view, &view.rows())?;
    Ok(ExitCode::SUCCESS)
}

/// What `inspect` prints; `--json` prints these fields.
#[derive(Debug, Serialize)]
struct View {
    /// The key as given.
    key: String,
    /// The key in the backend: the namespace and the key.
    stored_key: String,
    algorithm: String,
    /// Whether anything is stored (false: the key is fresh).
    stored: bool,
    /// The instant the state is read at.
    now_us: Ticks,
    /// The policy's limit or capacity.
    limit: u64,
    /// What the state holds, named by `measure`, in units.
    used: u64,
    /// `window count`, `weighted count`, `admitted in the last period`,
    /// `tokens available`, `water level` or `queue room`.
    measure: &'static str,
    /// Sliding log only: the instants it remembers.
    entries: Option<u64>,
    /// Whole units a request could take now.
    remaining: u64,
    /// Until the state is fresh again (0: fresh).
    fresh_after_us: Ticks,
    /// The canonical encoding, in hex (null when fresh).
    encoded: Option<String>,
}

impl View {
    /// `bytes`: the stored state's encoding (`None`: fresh); `decision`: what a request of
    /// no cost gets from it at `now`.
    fn new(
        policy: &Policy,
        key: &str,
        stored_key: &str,
        bytes: Option<Vec<u8>>,
        decision: &Decision,
        now: Ticks,
    ) -> Self {
        let limit = policy.limit();
        let left = limit.saturating_sub(decision.remaining);
        let (measure, used) = match policy.algorithm {
            Kind::FixedWindow => ("window count", left),
            Kind::SlidingCounter => ("weighted count", left),
            Kind::SlidingLog => ("admitted in the last period", left),
            Kind::TokenBucket => ("tokens available", decision.remaining),
            Kind::LeakyBucket => ("water level", left),
            Kind::Pacing => ("queue room", decision.remaining),
            // Shown by the lease view; no rate algorithm has this kind.
            Kind::Concurrency => ("leases held", left),
            _ => ("used of the tightest limit", left),
        };
        // Version, tag and length (10 bytes), then 16 bytes per instant.
        let entries = (policy.algorithm == Kind::SlidingLog && policy.ban.is_none()).then(|| {
            bytes.as_ref().map_or(0, |b| {
                u64::try_from(b.len().saturating_sub(10) / 16).unwrap_or(0)
            })
        });
        Self {
            key: key.to_owned(),
            stored_key: stored_key.to_owned(),
            algorithm: policy.algorithm.name().to_owned(),
            stored: bytes.is_some(),
            now_us: now,
            limit,
            used,
            measure,
            entries,
            remaining: decision.remaining,
            fresh_after_us: decision.reset_after,
            encoded: bytes.as_deref().map(hex),
        }
    }

    fn rows(&self) -> Vec<(&'static str, String)> {
        let mut rows = vec![
            ("key", self.key.clone()),
            ("stored as", self.stored_key.clone()),
            ("algorithm", self.algorithm.clone()),
        ];
        if let Some(encoded) = &self.encoded {
            rows.push((self.measure, format!("{} of {}", self.used, self.limit)));
            if let Some(entries) = self.entries {
                rows.push(("entries", entries.to_string()));
            }
            rows.push(("remaining", self.remaining.to_string()));
            rows.push((
                "fresh again",
                format!(
                    "in {} (at {} µs)",
                    human(self.fresh_after_us),
                    self.now_us.saturating_add(self.fresh_after_us)
                ),
            ));
            rows.push(("encoded", encoded.clone()));
        } else {
            rows.push(("state", "fresh (nothing stored)".into()));
            rows.push(("remaining", self.remaining.to_string()));
        }
        rows
    }
}
