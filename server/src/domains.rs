//! The domains of envoyproxy/ratelimit's YAML (`--envoy-config`), answered over gRPC
//! as their service answers: the rule each descriptor matches (their matching, in
//! `sluicegate_policy::envoy`), `replaces` applied across the request's descriptors,
//! `unlimited` admitted uncounted, a rule's `shadow_mode` reported `OK`, its
//! `quota_mode` refusing only with every quota rule of the request over, and every
//! counted rule decided on a sluicegate limiter of its own (a fixed window aligned as
//! theirs, unless `sluicegate_algorithm` names another).
//!
//! A descriptor's `limit` override (Envoy's `RateLimitOverride`, set from route
//! configuration or metadata) is, as theirs, the limit of that descriptor in a known
//! domain whatever the rules say: a fixed window of its requests per unit, keyed by all
//! its entries, never in shadow mode. Each distinct override has one limiter, built the
//! first time it is asked for; a server keeps at most [`MAX_OVERRIDES`] of them.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};

use sluicegate_core::Kind;
use sluicegate_policy::envoy::{key_of, Config, Domain, Limit, Rule, Unit};

use crate::grpc::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use crate::grpc::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use crate::grpc::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit,
};
use crate::grpc::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use crate::limiters::{Backend, Entry};
use crate::metrics::Metrics;
use crate::service::auth::App;
use crate::service::{Service, ServiceError};
use crate::time::now_s;

/// The most distinct limit overrides a server keeps a limiter for: overrides come from
/// a gateway's configuration, a handful of values; more is refused, not remembered.
pub(crate) const MAX_OVERRIDES: usize = 256;

/// The served configuration and a limiter per counted rule, by [`name`].
#[derive(Debug, Default)]
pub(crate) struct Rules {
    pub(crate) config: Config,
    pub(crate) limiters: HashMap<String, Arc<Entry>>,
    /// The limiters of descriptors' limit overrides, by [`name`] (kept across reloads).
    overrides: Mutex<HashMap<String, Arc<Entry>>>,
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
        let overrides = previous
            .overrides
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        Self {
            config,
            limiters,
            overrides: Mutex::new(overrides),
        }
    }

    /// The limiter of `rule`: a rule of the configuration's, or a limit override's
    /// (built the first time it is asked for).
    fn entry(
        &self,
        service: &Service,
        rule: &Rule,
        overridden: bool,
    ) -> Result<Arc<Entry>, ServiceError> {
        let name = name(rule);
        if !overridden {
            return self
                .limiters
                .get(&name)
                .cloned()
                .ok_or(ServiceError::Unavailable("the rule has no limiter"));
        }
        let mut overrides = self
            .overrides
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(entry) = overrides.get(&name) {
            return Ok(Arc::clone(entry));
        }
        if overrides.len() >= MAX_OVERRIDES {
            return Err(ServiceError::invalid(
                format!("at most {MAX_OVERRIDES} distinct limit overrides are kept"),
                Some("limit"),
            ));
        }
        let policy = rule
            .policy()
            .ok_or(ServiceError::Unavailable("the override has no limiter"))?;
        let entry = Entry::build(&name, &policy, &service.backend, None, &service.metrics)
            .map_err(|e| ServiceError::invalid(e, Some("limit")))?;
        overrides.insert(name, Arc::clone(&entry));
        Ok(entry)
    }
}

/// The rule of a descriptor's limit `override` in `domain`: named by its figures (one
/// limiter per distinct override), keyed by all of the descriptor's entries.
fn override_rule(domain: &str, limit: &RateLimitOverride) -> Result<Rule, ServiceError> {
    let unit = Unit::from_number(limit.unit).ok_or_else(|| {
        ServiceError::invalid("a limit override's unit is SECOND to WEEK", Some("limit"))
    })?;
    Ok(Rule {
        id: format!("{domain}.override.{}_per_{unit:?}", limit.requests_per_unit),
        limit: Limit::Rate {
            requests_per_unit: limit.requests_per_unit,
            unit,
            algorithm: Kind::FixedWindow,
        },
        shadow: false,
        quota: false,
        name: None,
        replaces: Vec::new(),
        detailed_metric: false,
    })
}

/// The rule a descriptor is decided by and its key: its limit override's, else the
/// rule it matches in `domain` (named `domain_name`); `true` for an override.
fn rule_of<'d>(
    domain: &'d Domain,
    domain_name: &str,
    descriptor: &RateLimitDescriptor,
) -> Result<Option<(Cow<'d, Rule>, String, bool)>, ServiceError> {
    let entries = descriptor
        .entries
        .iter()
        .map(|e| (e.key.as_str(), e.value.as_str()));
    if let Some(limit) = &descriptor.limit {
        let rule = override_rule(domain_name, limit)?;
        return Ok(Some((Cow::Owned(rule), key_of(entries), true)));
    }
    let entries: Vec<(&str, &str)> = entries.collect();
    Ok(domain
        .lookup(&entries)
        .map(|(rule, key)| (Cow::Borrowed(rule), key, false)))
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
    let matched = request
        .descriptors
        .iter()
        .map(|d| rule_of(domain, &request.domain, d))
        .collect::<Result<Vec<_>, _>>()?;
    // Theirs: a rule matched by any descriptor drops the counted rules it names.
    let replaced: HashSet<&str> = matched
        .iter()
        .flatten()
        .flat_map(|(rule, _, _)| rule.replaces.iter().map(String::as_str))
        .collect();
    let mut statuses = Vec::with_capacity(matched.len());
    // Theirs: the request is over if a counted rule is, or if every quota rule it
    // counted on is (quota rules alone never refuse while one has room).
    let (mut over, mut quotas, mut quotas_over) = (false, 0, 0);
    for (i, found) in matched.iter().enumerate() {
        let (status, quota) = match found {
            None => (uncounted(0), false),
            Some((rule, _, _)) if rule.limit == Limit::Unlimited => (uncounted(u32::MAX), false),
            Some((rule, _, _)) if rule.name.as_deref().is_some_and(|n| replaced.contains(n)) => {
                (uncounted(0), false)
            }
            Some((rule, key, overridden)) => {
                let status = decide(service, rules, rule, *overridden, key, cost(i)).await?;
                (status, rule.quota || service.quota_mode)
            }
        };
        let is_over = status.code == Code::OverLimit as i32;
        if quota {
            quotas += 1;
            quotas_over += usize::from(is_over);
        } else {
            over |= is_over;
        }
        statuses.push(status);
    }
    over |= quotas > 0 && quotas_over == quotas;
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
    overridden: bool,
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
    let entry = rules.entry(service, rule, overridden)?;
    let decided = service
        .decide_on(&entry, &name(rule), key, cost, rule.shadow)
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
