//! The domains of envoyproxy/ratelimit's YAML (`--envoy-config`) as served: the
//! configuration and a limiter per counted rule, each kept across reloads where its
//! parameters are the same, and the limiters of descriptors' limit overrides, built the
//! first time each is asked for (at most [`MAX_OVERRIDES`]). How a call is answered on
//! them is the gRPC front end's (its `domains`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use sluicegate_policy::envoy::{Config, Rule};

use super::error::ServiceError;
use crate::limiters::{Backend, PolicyLimiter};
use crate::metrics::Metrics;

/// The most distinct limit overrides a server keeps a limiter for: overrides come from
/// a gateway's configuration, a handful of values; more is refused, not remembered.
pub(crate) const MAX_OVERRIDES: usize = 256;

/// The served configuration and a limiter per counted rule, by [`rule_name`].
#[derive(Debug, Default)]
pub(crate) struct Rules {
    pub(crate) config: Config,
    pub(crate) limiters: HashMap<String, Arc<PolicyLimiter>>,
    /// The limiters of descriptors' limit overrides, by [`rule_name`] (kept across reloads).
    overrides: Mutex<HashMap<String, Arc<PolicyLimiter>>>,
}

/// A rule's name in the metrics and its limiter's: `envoy:` and their full key.
pub(crate) fn rule_name(rule: &Rule) -> String {
    format!("envoy:{}", rule.id)
}

impl Rules {
    /// The limiters of `config`'s rules on `backend`, each kept from `previous` where
    /// its parameters are the same.
    pub(crate) fn build(
        config: Config,
        backend: &dyn Backend,
        previous: &Self,
        metrics: &Metrics,
    ) -> Self {
        let mut limiters = HashMap::new();
        for (_, domain) in config.domains() {
            for rule in domain.rules() {
                let Some(policy) = rule.policy() else {
                    continue;
                };
                let name = rule_name(rule);
                let old = previous.limiters.get(&name);
                match PolicyLimiter::build(&name, &policy, backend, old, metrics) {
                    Ok(limiter) => {
                        limiters.insert(name, limiter);
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
    /// (built on `backend` the first time it is asked for).
    pub(crate) fn limiter(
        &self,
        backend: &dyn Backend,
        metrics: &Metrics,
        rule: &Rule,
        overridden: bool,
    ) -> Result<Arc<PolicyLimiter>, ServiceError> {
        let name = rule_name(rule);
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
        if let Some(limiter) = overrides.get(&name) {
            return Ok(Arc::clone(limiter));
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
        let limiter = PolicyLimiter::build(&name, &policy, backend, None, metrics)
            .map_err(|e| ServiceError::invalid(e.to_string(), Some("limit")))?;
        overrides.insert(name, Arc::clone(&limiter));
        Ok(limiter)
    }
}
