//! The domains of envoyproxy/ratelimit's YAML (`--envoy-config`) as served: the
//! configuration and a limiter per counted rule, each kept across reloads where its
//! parameters are the same, and the limiters of descriptors' limit overrides, built the
//! first time each is asked for, a bounded number per app, dropped once unused for a
//! window. How a call is answered on them is the gRPC front end's (its `domains`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use sluicegate_policy::envoy::{Config, Limit, Rule};

use super::error::ServiceError;
use crate::limiters::{Backend, PolicyLimiter};
use crate::metrics::{Metrics, Table};

/// The most distinct limit overrides one app holds a limiter for at once: overrides come
/// from a gateway's configuration, a handful of values. Each keeps this share of a
/// policy's keys and bytes in this process (`--max-keys`, `--max-policy-bytes`).
pub(crate) const MAX_OVERRIDES_PER_APP: usize = 32;
/// The most a server holds, all apps together.
pub(crate) const MAX_OVERRIDES: usize = 1024;

/// The served configuration and a limiter per counted rule, by [`rule_name`].
#[derive(Debug, Default)]
pub(crate) struct Rules {
    pub(crate) config: Config,
    pub(crate) limiters: HashMap<String, Arc<PolicyLimiter>>,
    /// The limiters of descriptors' limit overrides, by [`rule_name`] (kept across reloads).
    overrides: Mutex<HashMap<String, Held>>,
}

/// An override's limiter, the app that made it, and when it was last asked for.
#[derive(Debug, Clone)]
struct Held {
    limiter: Arc<PolicyLimiter>,
    app: String,
    used: Instant,
    /// After this long unused its counts are all fresh (a window has passed).
    period: Duration,
}

/// A rule's name in the metrics and its limiter's: `envoy:` and their full key.
fn rule_name(rule: &Rule) -> String {
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
        let overrides = previous.held().clone();
        Self {
            config,
            limiters,
            overrides: Mutex::new(overrides),
        }
    }

    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<String, Held>> {
        self.overrides
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether `name` is one of the limiters served (a rule's or an override's).
    pub(crate) fn serves(&self, name: &str) -> bool {
        self.limiters.contains_key(name) || self.held().contains_key(name)
    }

    /// The key tables of the rules' and the overrides' limiters, by name.
    pub(crate) fn tables(&self) -> Vec<(String, Table)> {
        let held = self.held();
        let overrides = held.iter().map(|(name, one)| (name, &one.limiter));
        self.limiters
            .iter()
            .chain(overrides)
            .filter_map(|(name, limiter)| Some((name.clone(), limiter.table()?)))
            .collect()
    }

    /// The limiter of a rule of the configuration's.
    pub(crate) fn limiter(&self, rule: &Rule) -> Result<Arc<PolicyLimiter>, ServiceError> {
        self.limiters
            .get(&rule_name(rule))
            .cloned()
            .ok_or(ServiceError::Unavailable("the rule has no limiter"))
    }

    /// The limiter of the limit override `rule` asked for by `app`, built on `backend`
    /// the first time; `None` when `app` holds [`MAX_OVERRIDES_PER_APP`] (or the server
    /// [`MAX_OVERRIDES`]) still in use: the caller decides on the rule's own limit.
    /// Overrides unused for a window are dropped first: their counts are fresh.
    pub(crate) fn override_limiter(
        &self,
        backend: &dyn Backend,
        metrics: &Metrics,
        rule: &Rule,
        app: &str,
    ) -> Option<Arc<PolicyLimiter>> {
        let name = rule_name(rule);
        let now = Instant::now();
        let mut held = self.held();
        if let Some(one) = held.get_mut(&name) {
            one.used = now;
            return Some(Arc::clone(&one.limiter));
        }
        held.retain(|_, one| now.duration_since(one.used) <= one.period);
        let apps = held.values().filter(|one| one.app == app).count();
        if apps >= MAX_OVERRIDES_PER_APP || held.len() >= MAX_OVERRIDES {
            return None;
        }
        let Limit::Rate { unit, .. } = rule.limit else {
            return None;
        };
        // An app's overrides together hold what one policy may in this process.
        let share = backend.share(MAX_OVERRIDES_PER_APP);
        let on = share.as_deref().unwrap_or(backend);
        let limiter = PolicyLimiter::build(&name, &rule.policy()?, on, None, metrics)
            .inspect_err(
                |e| tracing::warn!(rule = %rule.id, error = %e, "cannot build a limit override"),
            )
            .ok()?;
        held.insert(
            name,
            Held {
                limiter: Arc::clone(&limiter),
                app: app.to_owned(),
                used: now,
                period: Duration::from_secs(unit.seconds()),
            },
        );
        Some(limiter)
    }
}
