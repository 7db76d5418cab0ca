#![doc = include_str!("../README.md")]
#![deny(missing_docs)]
#![warn(unreachable_pub)]

mod config;
mod conn;
mod files;
#[cfg(feature = "grpc")]
pub mod grpc;
mod http;
mod key_usage;
mod limitador;
mod limiters;
mod metrics;
mod service;
mod store;
mod telemetry;
mod time;
mod token;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

pub use config::{Config, FlagError};
pub use files::FilesError;
use limiters::{Backend, InProcess, InRedis, Keys};
use service::Service;
pub use store::StoreError;
use store::{Store, User};
pub use telemetry::{Telemetry, TelemetryError};

/// Why the server could not start or stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Listening failed.
    #[error("cannot listen on {0}: {1}")]
    Listen(SocketAddr, std::io::Error),
    /// The decision backend's URL is unusable.
    #[error("--decisions: {0}")]
    Decisions(String),
    /// The store's URL is not one (the message never holds the URL: it may hold a
    /// password).
    #[error("--store: {0}")]
    StoreUrl(String),
    /// `--admin-name` is not a user name.
    #[error("--admin-name: {0}")]
    AdminName(String),
    /// A policy file is invalid (`PATH:LINE:COLUMN: why`).
    #[error(transparent)]
    Files(#[from] files::FilesError),
    /// `--grpc-listen` or `--envoy-config` given to a server built without gRPC.
    #[error("--grpc-listen and --envoy-config: this server is built without its `grpc` feature")]
    NoGrpc,
    /// `--init-admin` found an admin already.
    #[error("an admin exists already; ask them for a token (POST /v1/users)")]
    AdminExists,
}

/// Opens the store a configuration names.
async fn open_store(config: &Config) -> Result<Store, Error> {
    Ok(match &config.store {
        Some(url) => {
            store::check_url(url).map_err(Error::StoreUrl)?;
            Store::open(url).await?
        }
        None => Store::open_dir(&config.data_dir).await?,
    })
}

/// Creates the first admin, `name`, and returns its token (shown once); refuses if an
/// admin exists.
pub async fn init_admin(config: &Config, name: &str) -> Result<String, Error> {
    service::check_name(name, "user name").map_err(|e| Error::AdminName(e.to_string()))?;
    let store = open_store(config).await?;
    let token = token::new(token::USER);
    let user = User {
        name: name.to_owned(),
        admin: true,
        roles: Default::default(),
    };
    let hash = token::hash(&token);
    let change = store::Account::CreateUser {
        user: &user,
        hash: &hash,
    };
    // Checked in the write's transaction: two first admins cannot both be made.
    let no_admin = |facts: &store::Facts| match facts.users.values().any(|u| u.admin) {
        true => Err(Error::AdminExists),
        false => Ok(()),
    };
    match store
        .write_account(change, name, time::now_s(), no_admin)
        .await
    {
        Ok(true) => Ok(token),
        Ok(false) | Err(store::WriteError::Refused(_)) => Err(Error::AdminExists),
        Err(store::WriteError::Store(e)) => Err(e.into()),
    }
}

/// A server bound to its address, not yet serving.
#[derive(Debug)]
pub struct Server {
    listener: tokio::net::TcpListener,
    grpc: Option<tokio::net::TcpListener>,
    service: Arc<Service>,
}

impl Server {
    /// Opens the store, loads it, and binds the listening socket.
    pub async fn bind(config: Config) -> Result<Self, Error> {
        let store = open_store(&config).await?;
        let keys = Keys {
            max_keys: config.max_keys,
            max_policy_bytes: config.max_policy_bytes,
        };
        let backend: Box<dyn Backend> = match &config.decisions {
            None => Box::new(InProcess(keys)),
            Some(url) => {
                let timeout = sluicegate_redis::DEFAULT_TIMEOUT;
                let con = sluicegate_redis::ReconnectingAsync::open(url, None, timeout)
                    .map_err(|e| Error::Decisions(e.to_string()))?;
                Box::new(InRedis::new(con, config.fail.clone(), keys))
            }
        };
        let service = Arc::new(Service::new(store, backend, config));
        service.reload(true).await?;
        let config = &service.config;
        let sources = files::Sources::of(config);
        if sources.any() {
            let loaded = sources.load(&*service.backend)?;
            service.set_files(loaded).await;
        }
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .map_err(|e| Error::Listen(config.listen, e))?;
        if cfg!(not(feature = "grpc"))
            && (config.grpc_listen.is_some() || config.envoy_config.is_some())
        {
            return Err(Error::NoGrpc);
        }
        let grpc = match config.grpc_listen {
            Some(addr) => Some(
                tokio::net::TcpListener::bind(addr)
                    .await
                    .map_err(|e| Error::Listen(addr, e))?,
            ),
            None => None,
        };
        Ok(Self {
            listener,
            grpc,
            service,
        })
    }

    /// The address it listens on (the port chosen when `listen` asked for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .unwrap_or(self.service.config.listen)
    }

    /// The address the gRPC service listens on, if it has one.
    pub fn grpc_addr(&self) -> Option<SocketAddr> {
        self.grpc.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// Serves until `shutdown` completes, then finishes the requests in flight.
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), Error> {
        let service = Arc::clone(&self.service);
        let poll = self.service.config.poll;
        // Changes made by other servers arrive through the store's change counter.
        let poller = tokio::spawn(async move {
            let mut tick = tokio::time::interval(poll);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                if let Err(e) = service.reload(false).await {
                    tracing::warn!(error = %e, "polling the store; serving the policies last read");
                }
                service.prune_reports(time::now_s()).await;
            }
        });
        // One shutdown signal for both listeners.
        let (stop, stopped) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            shutdown.await;
            let _ = stop.send(true);
        });
        tracing::info!(listen = %self.local_addr(), decisions = self.service.backend.name(), "serving");
        let config = &self.service.config;
        let bounds = conn::Bounds {
            header: config.header_timeout,
            idle: config.idle_timeout,
        };
        let sources = files::Sources::of(config);
        let watcher = sources
            .any()
            .then(|| tokio::spawn(files::watch(Arc::clone(&self.service), sources)));
        #[cfg(feature = "grpc")]
        let grpc = self.grpc.map(|listener| {
            let mut stopped = stopped.clone();
            let until = async move {
                let _ = stopped.wait_for(|stop| *stop).await;
            };
            grpc::spawn(listener, Arc::clone(&self.service), config, bounds, until)
        });
        let gate = conn::Gate::new(
            self.listener,
            config.max_connections,
            bounds,
            conn::HTTP_REFUSAL,
        )
        .with_probe_room();
        let app = http::router::router(Arc::clone(&self.service), config.timeout);
        let probes = &http::PROBES;
        conn::serve_http1(gate, app, probes, stopped.clone(), config.shutdown_timeout).await;
        #[cfg(feature = "grpc")]
        if let Some(grpc) = grpc {
            grpc::finish(grpc, config.shutdown_timeout).await;
        }
        poller.abort();
        if let Some(watcher) = watcher {
            watcher.abort();
        }
        Ok(())
    }
}
