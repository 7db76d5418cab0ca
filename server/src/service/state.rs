//! The service's state: the store, the snapshot of it every request reads, the
//! limiters built from it, and the reload that keeps both current.

use std::sync::{Arc, RwLock};

use sluicegate_policy::envoy;

use crate::domains::Rules;
use crate::limiters::{Backend, Entry, Limiters};
use crate::metrics::Metrics;
use crate::store::{Snapshot, Store, StoreError};

use super::policies::Caps;

/// What every request shares, whichever front end it came through.
#[derive(Debug)]
pub(crate) struct Service {
    /// The database.
    pub(crate) store: Store,
    /// The store's contents as of its last change seen.
    snapshot: RwLock<Arc<Snapshot>>,
    /// A limiter per policy.
    limiters: RwLock<Arc<Limiters>>,
    /// The domains of Envoy's YAML (`--envoy-config`) and a limiter per rule.
    envoy: RwLock<Arc<Rules>>,
    /// Where decisions are kept.
    pub(crate) backend: Backend,
    /// The counters.
    pub(crate) metrics: Metrics,
    /// `/metrics` without a token.
    pub(crate) metrics_open: bool,
    /// The most policies the store may hold.
    pub(crate) caps: Caps,
    /// Every rate policy in shadow mode (`--shadow`).
    pub(crate) shadow: bool,
    /// Serializes reloads, so a slow one never overwrites a newer one.
    reloading: tokio::sync::Mutex<()>,
}

impl Service {
    /// A service over `store`, deciding on `backend` (every rate policy in shadow mode
    /// if `shadow`), with nothing loaded yet (see [`Service::reload`]).
    pub(crate) fn new(
        store: Store,
        backend: Backend,
        metrics_open: bool,
        caps: Caps,
        shadow: bool,
    ) -> Self {
        Self {
            caps,
            shadow,
            store,
            snapshot: RwLock::default(),
            limiters: RwLock::default(),
            envoy: RwLock::default(),
            backend,
            metrics: Metrics::default(),
            metrics_open,
            reloading: tokio::sync::Mutex::new(()),
        }
    }

    /// The store's contents as last read.
    pub(crate) fn snapshot(&self) -> Arc<Snapshot> {
        Arc::clone(&self.snapshot.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// The limiters of the policies last read.
    pub(crate) fn limiters(&self) -> Arc<Limiters> {
        Arc::clone(&self.limiters.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// The domains of Envoy's YAML and their limiters.
    pub(crate) fn envoy(&self) -> Arc<Rules> {
        Arc::clone(&self.envoy.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// Serves the domains of `config`, keeping the limiter (and so the counts) of
    /// every rule whose parameters are unchanged.
    pub(crate) async fn set_envoy(&self, config: envoy::Config) {
        let _one = self.reloading.lock().await;
        let rules = Rules::build(config, &self.backend, &self.envoy(), &self.metrics);
        *self.envoy.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(rules);
        self.retain_metrics(&self.snapshot());
    }

    /// Drops the counters of policies and rules no longer served.
    fn retain_metrics(&self, snapshot: &Snapshot) {
        let envoy = self.envoy();
        self.metrics.retain(|name| {
            snapshot.policies.contains_key(name) || envoy.limiters.contains_key(name)
        });
    }

    /// Reads the store again if its counter moved (or `force`), and rebuilds the
    /// limiters whose policies changed.
    pub(crate) async fn reload(&self, force: bool) -> Result<(), StoreError> {
        let _one = self.reloading.lock().await;
        let result = async {
            if !force && self.store.counter().await? == self.snapshot().counter {
                return Ok(());
            }
            // A forced read (at start) reads everything; else only what changed.
            let old = self.snapshot();
            let snapshot = self.store.snapshot((!force).then_some(&*old)).await?;
            for _ in 0..snapshot.unreadable {
                self.metrics.store_error();
            }
            let old = self.limiters();
            let mut limiters = Limiters::new();
            for (name, stored) in &snapshot.policies {
                match Entry::build(
                    name,
                    &stored.policy,
                    &self.backend,
                    old.get(name),
                    &self.metrics,
                ) {
                    Ok(entry) => {
                        limiters.insert(name.clone(), entry);
                    }
                    Err(e) => tracing::error!(policy = %name, error = %e, "cannot build a limiter"),
                }
            }
            self.retain_metrics(&snapshot);
            *self.limiters.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(limiters);
            *self.snapshot.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(snapshot);
            Ok(())
        }
        .await;
        if result.is_err() {
            self.metrics.store_error();
        }
        result
    }

    /// After a change this server made: it sees its own change at once, the others
    /// within a poll. A failure is only logged (the change is stored).
    pub(crate) async fn changed(&self) {
        if let Err(e) = self.reload(false).await {
            tracing::warn!(error = %e, "reload after a write");
        }
    }
}
