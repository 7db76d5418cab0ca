//! The service's state: the store, the snapshot of it every request reads, the
//! limiters built from it, and the reload that keeps both current.

use std::sync::atomic::AtomicI64;
use std::sync::{Arc, RwLock};

use std::collections::BTreeMap;

use sluicegate_policy::Policy;

use sluicegate_policy::{envoy, limitador};

use super::domains::Rules;
use crate::config::Config;
use crate::limitador::{Calls, Counters, Limits};
use crate::limiters::{Backend, Limiters, PolicyLimiter};
use crate::metrics::Metrics;
use crate::store::{Snapshot, Store, StoreError, Stored};

/// What the policy files define.
#[derive(Debug, Clone, Default)]
pub(crate) struct Loaded {
    /// The TOML files' policies by name, each with its file.
    pub(crate) policies: BTreeMap<String, (String, Policy)>,
    /// The YAML files' domains.
    pub(crate) envoy: envoy::Config,
    /// limitador's limits file's namespaces.
    pub(crate) limitador: limitador::Config,
}

/// The policies served (the store's as of its last change seen, with the files') and a
/// limiter per policy, published as one value: a request reads both of one moment, so
/// it never finds a policy without its limiter.
#[derive(Debug, Default)]
pub(crate) struct Served {
    pub(crate) snapshot: Arc<Snapshot>,
    pub(crate) limiters: Limiters,
}

/// What every request shares, whichever front end it came through.
#[derive(Debug)]
pub(crate) struct Service {
    /// The database.
    pub(crate) store: Store,
    /// The policies served and their limiters.
    served: RwLock<Arc<Served>>,
    /// The store's contents alone, which the next read of its changes starts from.
    stored: RwLock<Arc<Snapshot>>,
    /// The policies of the TOML policy files (`--policies`) by name, with their file.
    files: RwLock<Arc<BTreeMap<String, (String, Policy)>>>,
    /// The domains of Envoy's YAML (`--envoy-config`) and a limiter per rule.
    envoy: RwLock<Arc<Rules>>,
    /// limitador's limits file (`--limitador-config`) as served.
    limitador: RwLock<Arc<Limits>>,
    /// The counters of limitador's limits, kept across reloads.
    pub(crate) counters: Arc<dyn Counters>,
    /// limitador's metrics, under its names.
    pub(crate) limitador_calls: Arc<Calls>,
    /// Where decisions are kept.
    pub(crate) backend: Box<dyn Backend>,
    /// The counters.
    pub(crate) metrics: Metrics,
    /// How the server runs (the flags of `sluicegate serve`).
    pub(crate) config: Config,
    /// Serializes reloads, so a slow one never overwrites a newer one.
    reloading: tokio::sync::Mutex<()>,
    /// When this server last pruned reports' ids, in unix seconds.
    pub(super) reports_pruned: AtomicI64,
    /// The last readiness probe.
    pub(super) probe: super::ready::Probe,
}

impl Service {
    /// A service over `store` deciding in `backend`, run as `config` says, with nothing
    /// loaded yet (see [`Service::reload`]).
    pub(crate) fn new(store: Store, backend: Box<dyn Backend>, config: Config) -> Self {
        let metrics = Metrics::with_key_usage(&config.key_usage, config.key_usage_max);
        let limitador_calls = Arc::new(Calls::default());
        if config.limitador_config.is_some() {
            let calls: Arc<dyn crate::metrics::Shown> = Arc::clone(&limitador_calls) as _;
            metrics.add_shown(Arc::downgrade(&calls));
        }
        Self {
            metrics,
            config,
            store,
            served: RwLock::default(),
            stored: RwLock::default(),
            files: RwLock::default(),
            envoy: RwLock::default(),
            limitador: RwLock::default(),
            counters: backend.counters(),
            limitador_calls,
            backend,
            reloading: tokio::sync::Mutex::new(()),
            reports_pruned: AtomicI64::new(0),
            probe: super::ready::Probe::default(),
        }
    }

    /// The policies served and their limiters, as last published.
    pub(crate) fn served(&self) -> Arc<Served> {
        Arc::clone(&self.served.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// The policies served (the store's as last read, and the files'), apps and users.
    pub(crate) fn snapshot(&self) -> Arc<Snapshot> {
        Arc::clone(&self.served().snapshot)
    }

    /// The domains of Envoy's YAML and their limiters.
    pub(crate) fn envoy(&self) -> Arc<Rules> {
        Arc::clone(&self.envoy.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// limitador's limits as served.
    pub(crate) fn limitador(&self) -> Arc<Limits> {
        Arc::clone(&self.limitador.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// Serves what the policy files define (`--policies`, `--envoy-config`) in place of
    /// what they defined before, keeping the limiter (and so the counts) of every
    /// policy and rule whose parameters are unchanged.
    pub(crate) async fn set_files(&self, loaded: Loaded) {
        let _one = self.reloading.lock().await;
        let rules = Rules::build(loaded.envoy, &*self.backend, &self.envoy(), &self.metrics);
        *self.envoy.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(rules);
        // A limit removed loses its counters; one kept (same identity) keeps them.
        let limits = Limits::build(loaded.limitador);
        self.counters.retain(&|key| limits.keeps(key));
        *self.limitador.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(limits);
        *self.files.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(loaded.policies);
        self.publish(self.stored());
    }

    /// The store's contents as last read, without the files' policies.
    fn stored(&self) -> Arc<Snapshot> {
        Arc::clone(&self.stored.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// Serves `stored` with the files' policies over it (a file's policy hides a stored
    /// one of the same name), rebuilding the limiters whose policies changed. Called
    /// with `reloading` held.
    fn publish(&self, stored: Arc<Snapshot>) {
        let files = Arc::clone(&self.files.read().unwrap_or_else(|e| e.into_inner()));
        let snapshot = if files.is_empty() {
            Arc::clone(&stored)
        } else {
            let mut served = (*stored).clone();
            for (name, (file, policy)) in files.iter() {
                if served.policies.contains_key(name) {
                    tracing::warn!(policy = %name, file = %file, "a policy file's policy hides the stored one of the same name");
                }
                served
                    .policies
                    .insert(name.clone(), Stored::from_file(name, file, policy));
            }
            Arc::new(served)
        };
        let old = self.served();
        let mut limiters = Limiters::new();
        for (name, stored) in &snapshot.policies {
            match PolicyLimiter::build(
                name,
                &stored.policy,
                &*self.backend,
                old.limiters.get(name),
                &self.metrics,
            ) {
                Ok(entry) => {
                    limiters.insert(name.clone(), entry);
                }
                Err(e) => tracing::error!(policy = %name, error = %e, "cannot build a limiter"),
            }
        }
        let envoy = self.envoy();
        self.metrics
            .retain(|name| snapshot.policies.contains_key(name) || envoy.serves(name));
        let served = Served { snapshot, limiters };
        *self.served.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(served);
        *self.stored.write().unwrap_or_else(|e| e.into_inner()) = stored;
    }

    /// Reads the store again if its counter moved (or `force`), and rebuilds the
    /// limiters whose policies changed.
    pub(crate) async fn reload(&self, force: bool) -> Result<(), StoreError> {
        let _one = self.reloading.lock().await;
        let result = async {
            if !force && self.store.counter().await? == self.stored().counter {
                return Ok(());
            }
            // A forced read (at start) reads everything; else only what changed.
            let old = self.stored();
            let snapshot = self.store.snapshot((!force).then_some(&*old)).await?;
            for _ in 0..snapshot.unreadable {
                self.metrics.store_error();
            }
            self.publish(Arc::new(snapshot));
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
