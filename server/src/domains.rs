//! The domains of envoyproxy/ratelimit's YAML (`--envoy-config`), answered over gRPC
//! as their service answers: the rule each descriptor matches (their matching, in
//! `sluicegate_policy::envoy`), `replaces` applied across the request's descriptors,
//! `unlimited` admitted uncounted, a rule's `shadow_mode` reported `OK`, and every
//! counted rule decided on a sluicegate limiter of its own (a fixed window aligned as
//! theirs, unless `sluicegate_algorithm` names another).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use sluicegate_policy::envoy::{Config, Domain, Limit, Rule};

use crate::grpc::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit,
};
use crate::grpc::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use crate::limiters::{Backend, Entry};
use crate::metrics::Metrics;
use crate::service::auth::App;
use crate::service::{Service, ServiceError};
use crate::time::now_s;

/// The served configuration and a limiter per counted rule, by [`name`].
#[derive(Debug, Default)]
pub(crate) struct Rules {
    pub(crate) config: Config,
    pub(crate) limiters: HashMap<String, Arc<Entry>>,
}

/// A rule's name in the metrics and its limiter's: `envoy:` and their full key.
fn name(rule: &Rule) -> String {
    format!("envoy:{}", rule.id)
}

impl Rules {
    /// The limiters of `config`'s rules on `backend`, each kept from `previous` where
    /// its parameters are the same.
    pub(crate) fn build(
        config: Config,
        backend: &Backend,
        previous: &Self,
        metrics: &Metrics,
    ) -> Self {
        let mut limiters = HashMap::new();
        for (_, domain) in config.domains() {
            for rule in domain.rules() {
                let Some(policy) = rule.policy() else {
                    continue;
                };
                let name = name(rule);
                let old = previous.limiters.get(&name);
                match Entry::build(&name, &policy, backend, old, metrics) {
                    Ok(entry) => {
                        limiters.insert(name, entry);
                    }
                    Err(e) => {
                        tracing::error!(rule = %rule.id, error = %e, "cannot build a limiter")
                    }
                }
            }
        }
        Self { config, limiters }
    }
}

/// The status of a descriptor no counted rule applies to: `OK`, no limit, and
/// `remaining` (theirs: the largest u32 for `unlimited`, else 0).
fn uncounted(remaining: u32) -> DescriptorStatus {
    DescriptorStatus {
        code: Code::Ok as i32,
        limit_remaining: remaining,
        ..DescriptorStatus::default()
    }
}

/// Seconds left in the current window of `unit_s` seconds, aligned as theirs.
fn window_left(unit_s: u64) -> u64 {
    let now = u64::try_from(now_s()).unwrap_or(0);
    unit_s - now % unit_s
}

fn duration(micros: u64) -> prost_types::Duration {
    prost_types::Duration {
        seconds: i64::try_from(micros / 1_000_000).unwrap_or(i64::MAX),
        // Below 10^9: the remainder of a division by 10^6, times 1000.
        nanos: i32::try_from(micros % 1_000_000 * 1000).unwrap_or(0),
    }
}

/// The answer to `request` for `domain`, for `app`; `cost` gives each descriptor's.
pub(crate) async fn answer(
    service: &Service,
    rules: &Rules,
    domain: &Domain,
    app: &App,
    request: &RateLimitRequest,
    cost: impl Fn(usize) -> u64,
) -> Result<RateLimitResponse, ServiceError> {
    if !domain.admits_app(app.name()) {
        return Err(ServiceError::forbidden(format!(
            "no such domain for this app: {:?}",
            request.domain
        )));
    }
    let matched: Vec<Option<(&Rule, String)>> = request
        .descriptors
        .iter()
        .map(|d| {
            let entries: Vec<(&str, &str)> = d
                .entries
                .iter()
                .map(|e| (e.key.as_str(), e.value.as_str()))
                .collect();
            domain.lookup(&entries)
        })
        .collect();
    // Theirs: a rule matched by any descriptor drops the counted rules it names.
    let replaced: HashSet<&str> = matched
        .iter()
        .flatten()
        .flat_map(|(rule, _)| rule.replaces.iter().map(String::as_str))
        .collect();
    let mut statuses = Vec::with_capacity(matched.len());
    let mut over = false;
    for (i, found) in matched.iter().enumerate() {
        let status = match found {
            None => uncounted(0),
            Some((rule, _)) if rule.limit == Limit::Unlimited => uncounted(u32::MAX),
            Some((rule, _)) if rule.name.as_deref().is_some_and(|n| replaced.contains(n)) => {
                uncounted(0)
            }
            Some((rule, key)) => decide(service, rules, rule, key, cost(i)).await?,
        };
        over |= status.code == Code::OverLimit as i32;
        statuses.push(status);
    }
    Ok(RateLimitResponse {
        overall_code: if over && !service.shadow {
            Code::OverLimit
        } else {
            Code::Ok
        } as i32,
        statuses,
        ..RateLimitResponse::default()
    })
}

/// One counted rule's status: its decision, `OK` in the rule's shadow mode.
async fn decide(
    service: &Service,
    rules: &Rules,
    rule: &Rule,
    key: &str,
    cost: u64,
) -> Result<DescriptorStatus, ServiceError> {
    let Limit::Rate {
        requests_per_unit,
        unit,
        ..
    } = rule.limit
    else {
        return Ok(uncounted(u32::MAX));
    };
    let current_limit = Some(RateLimit {
        name: rule.name.clone().unwrap_or_default(),
        requests_per_unit,
        unit: unit as i32,
    });
    if requests_per_unit == 0 {
        // Nothing is counted: every request is over.
        return Ok(DescriptorStatus {
            code: if rule.shadow {
                Code::Ok
            } else {
                Code::OverLimit
            } as i32,
            current_limit,
            limit_remaining: 0,
            duration_until_reset: Some(duration(window_left(unit.seconds()) * 1_000_000)),
        });
    }
    let name = name(rule);
    let entry = rules
        .limiters
        .get(&name)
        .ok_or(ServiceError::Unavailable("the rule has no limiter"))?;
    let decided = service
        .decide_on(entry, &name, key, cost, rule.shadow)
        .await?;
    let decision = decided.decision;
    Ok(DescriptorStatus {
        code: if decision.allowed || rule.shadow {
            Code::Ok
        } else {
            Code::OverLimit
        } as i32,
        current_limit,
        limit_remaining: u32::try_from(decision.remaining).unwrap_or(u32::MAX),
        duration_until_reset: Some(duration(decision.reset_after)),
    })
}
