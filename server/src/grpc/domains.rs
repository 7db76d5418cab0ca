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
//! first time it is asked for; an app holds a bounded number of them at once, and an
//! override beyond them (or of a unit not theirs) is decided by the rule the descriptor
//! matches, never an error for the call.

use std::borrow::Cow;
use std::collections::HashSet;
use std::sync::Arc;

use sluicegate_core::Kind;
use sluicegate_policy::envoy::{key_of, Domain, Limit, Rule, Unit};

use super::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use super::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use super::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit,
};
use super::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use super::wire::{bounded, duration, undecided};
use crate::limiters::PolicyLimiter;
use crate::service::auth::App;
use crate::service::{Rules, Service, ServiceError};
use crate::time::now_s;

/// The rule of a descriptor's limit `override` in `domain`, if its unit is one of
/// theirs: named by its figures (one limiter per distinct override).
fn override_rule(domain: &str, limit: &RateLimitOverride) -> Option<Rule> {
    let unit = Unit::from_number(limit.unit)?;
    Some(Rule {
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

/// A descriptor's rule, its key, and the override's limiter if it is decided by one.
type Matched<'d> = (Cow<'d, Rule>, String, Option<Arc<PolicyLimiter>>);

/// The rule a descriptor is decided by and its key: its limit override's (keyed by all
/// of its entries) if `app` may hold one more, else the rule it matches in `domain`.
fn rule_of<'d>(
    service: &Service,
    rules: &Rules,
    domain: &'d Domain,
    request: &RateLimitRequest,
    descriptor: &RateLimitDescriptor,
    app: &App,
) -> Option<Matched<'d>> {
    let entries: Vec<(&str, &str)> = descriptor
        .entries
        .iter()
        .map(|e| (e.key.as_str(), e.value.as_str()))
        .collect();
    let overridden = descriptor.limit.as_ref().and_then(|limit| {
        let rule = override_rule(&request.domain, limit)?;
        // An override of 0 refuses everything and counts nothing: it needs no limiter.
        let limiter = match limit.requests_per_unit {
            0 => None,
            _ => Some(rules.override_limiter(
                &*service.backend,
                &service.metrics,
                &rule,
                app.name(),
            )?),
        };
        Some((Cow::Owned(rule), key_of(entries.iter().copied()), limiter))
    });
    overridden.or_else(|| {
        domain
            .lookup(&entries)
            .map(|(rule, key)| (Cow::Borrowed(rule), key, None))
    })
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
    let matched: Vec<_> = request
        .descriptors
        .iter()
        .map(|d| rule_of(service, rules, domain, request, d, app))
        .collect();
    // Theirs: a rule matched by any descriptor drops the counted rules it names.
    let replaced: HashSet<String> = matched
        .iter()
        .flatten()
        .flat_map(|(rule, _, _)| rule.replaces.iter().cloned())
        .collect();
    let mut statuses = Vec::with_capacity(matched.len());
    // Theirs: the request is over if a counted rule is, or if every quota rule it
    // counted on is (quota rules alone never refuse while one has room). A descriptor
    // that fails never fails its siblings: its error is the call's only when none is over.
    let (mut over, mut quotas, mut quotas_over, mut failed) = (false, 0, 0, None);
    for (i, found) in matched.into_iter().enumerate() {
        let (status, quota) = match found {
            None => (uncounted(0), false),
            Some((rule, _, _)) if rule.limit == Limit::Unlimited => (uncounted(u32::MAX), false),
            Some((rule, _, _)) if rule.name.as_ref().is_some_and(|n| replaced.contains(n)) => {
                (uncounted(0), false)
            }
            Some((rule, key, overridden)) => {
                let key = bounded(key);
                match decide(service, rules, &rule, overridden, &key, cost(i)).await {
                    Ok(status) => (status, rule.quota || service.config.quota_mode),
                    Err(e) => {
                        failed.get_or_insert(e);
                        (undecided(), false)
                    }
                }
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
    if let (false, Some(e)) = (over, failed) {
        return Err(e);
    }
    Ok(RateLimitResponse {
        overall_code: if over && !service.config.shadow {
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
    overridden: Option<Arc<PolicyLimiter>>,
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
    let limiter = match overridden {
        Some(limiter) => limiter,
        None => rules.limiter(rule)?,
    };
    let decided = service.decide_on(&limiter, key, cost, rule.shadow).await?;
    let figures = decided.decision();
    Ok(DescriptorStatus {
        code: if decided.outcome.allowed() || rule.shadow {
            Code::Ok
        } else {
            Code::OverLimit
        } as i32,
        current_limit,
        limit_remaining: figures.map_or(0, |d| u32::try_from(d.remaining).unwrap_or(u32::MAX)),
        duration_until_reset: figures.map(|d| duration(d.reset_after)),
    })
}

#[cfg(test)]
mod tests {
    use super::{override_rule, RateLimitOverride};
    use crate::limiters::{Backend, InProcess, InRedis, Keys};
    use crate::metrics::Metrics;
    use crate::service::Rules;
    use sluicegate_core::FailPolicy;

    const KEYS: Keys = Keys {
        max_keys: 64,
        max_policy_bytes: 1 << 20,
    };

    /// Every override an app may hold, each sprayed with `spray` keys, leaves no more
    /// keys (nor room for them) in this process than one policy may hold.
    async fn overrides_hold_one_policys_keys(backend: &dyn Backend, spray: usize) {
        const HOUR: i32 = 3;
        let (metrics, rules) = (Metrics::default(), Rules::default());
        let mut held = Vec::new();
        for requests_per_unit in 1000..1032 {
            let limit = RateLimitOverride {
                requests_per_unit,
                unit: HOUR,
            };
            let rule = override_rule("d", &limit).expect("a unit of theirs");
            let limiter = rules
                .override_limiter(backend, &metrics, &rule, "app")
                .expect("an override within the app's bound");
            for key in 0..spray {
                let _ = limiter.decide(&format!("k{key}"), 1).await;
            }
            held.push(limiter);
        }
        let tables = held.iter().filter_map(|l| l.table());
        let (count, capacity) = tables.fold((0, 0), |(k, c), t| (k + t.keys, c + t.capacity));
        assert!(spray == 0 || count > 0, "keys were held");
        assert!(count <= KEYS.max_keys, "{count} keys held");
        assert!(capacity <= KEYS.max_keys, "{capacity} keys of capacity");
    }

    #[tokio::test]
    async fn an_apps_overrides_together_hold_one_policys_keys() {
        overrides_hold_one_policys_keys(&InProcess(KEYS), 200).await;
    }

    /// Deciding in Redis, with `--fail local`: the local tables' room (no decisions:
    /// with Redis away each would wait for its timeout).
    #[tokio::test]
    async fn their_local_fallback_tables_too() {
        let gone = sluicegate_test_support::free_port();
        let url = format!("redis://127.0.0.1:{gone}");
        let timeout = std::time::Duration::from_millis(100);
        let con = sluicegate_redis::ReconnectingAsync::open(&url, None, timeout).unwrap();
        let backend = InRedis::new(con, FailPolicy::Local(()), KEYS);
        overrides_hold_one_policys_keys(&backend, 0).await;
    }
}
