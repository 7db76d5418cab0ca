//! Policy files with positions in their errors, and the algorithm each policy builds as
//! one value the commands run. The model and its parser are the service's
//! (`tollgate_server::policy`): one parser for the file and the API.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::ops::Range;

use crate::backend::Hosted;
use serde::Deserialize;
use tollgate_core::{
    Concurrency, FixedWindow, LeakyBucket, Pacing, SlidingCounter, SlidingLog, Ticks, TokenBucket,
};
pub use tollgate_server::policy::{
    check_lease, human, in_unit_of, list, param_problem, parse_duration, short, Duration, Kind,
    Policy, Style,
};
use tollgate_server::policy::{Built, File, Rate, Rule};

use crate::Failure;

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
    limits: Option<toml::Spanned<toml::Value>>,
    ban: Option<toml::Spanned<toml::Value>>,
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
    let limiter = limiter(&policy, Style::File).map_err(|problem| {
        // Point at the value at fault, else at the policy's table.
        let spans: Option<toml::Spanned<Spans>> = toml::from_str::<SpanFile>(&text)
            .ok()
            .and_then(|mut f| f.policies.remove(name));
        let at = spans.map_or_else(String::new, |spans| {
            // A composite's member or the ban's field: point at the list or the table.
            let top = problem
                .field
                .as_deref()
                .map(|f| f.split(['.', '[']).next().unwrap_or(f).to_owned());
            let field = top.and_then(|field| match field.as_str() {
                "limit" => spans.get_ref().limit.as_ref(),
                "capacity" => spans.get_ref().capacity.as_ref(),
                "rate" => spans.get_ref().rate.as_ref(),
                "period" => spans.get_ref().period.as_ref(),
                "lease" => spans.get_ref().lease.as_ref(),
                "limits" => spans.get_ref().limits.as_ref(),
                "ban" => spans.get_ref().ban.as_ref(),
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
    /// A composite or a ban: any rule, chosen at run time.
    Rule(Rule),
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
            Self::Rule(a) => job.run(a.clone()),
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

/// What `policy` builds, as the commands run it: one algorithm directly (the in-memory
/// host keeps its state in one atomic word), composites and bans as a [`Rule`].
pub fn limiter(policy: &Policy, style: Style) -> Result<Limiter, tollgate_server::policy::Problem> {
    Ok(match policy.build(style)? {
        Built::Rule(Rule::Rate(rate)) => match rate {
            Rate::FixedWindow(a) => Limiter::FixedWindow(a),
            Rate::SlidingLog(a) => Limiter::SlidingLog(a),
            Rate::SlidingCounter(a) => Limiter::SlidingCounter(a),
            Rate::TokenBucket(a) => Limiter::TokenBucket(a),
            Rate::LeakyBucket(a) => Limiter::LeakyBucket(a),
            Rate::Pacing(a) => Limiter::Pacing(a),
            other => Limiter::Rule(Rule::Rate(other)),
        },
        Built::Rule(rule) => Limiter::Rule(rule),
        Built::Leases { model, ttl } => Limiter::Leases { model, ttl },
        other => {
            return Err(tollgate_server::policy::Problem {
                field: None,
                message: format!("this command line cannot run {other:?}"),
            })
        }
    })
}
