#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod coalesce;
mod conn;
mod domains;
mod files;
pub mod grpc;
mod http;
mod key_usage;
mod limiters;
mod metrics;
mod service;
mod store;
mod time;
mod token;

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use limiters::{Backend, Keys};
use service::Service;
use sluicegate_core::FailPolicy;
pub use store::StoreError;
use store::{Store, User};

/// How a server runs (the flags of `sluicegate serve`).
#[derive(Debug, Clone)]
pub struct Config {
    /// Where to listen (`--listen`, default `127.0.0.1:8080`).
    pub listen: SocketAddr,
    /// Where to serve Envoy's rate limit service over gRPC (`--grpc-listen`); none by
    /// default.
    pub grpc_listen: Option<SocketAddr>,
    /// The embedded store's directory (`--data-dir`), used unless `store` is set.
    pub data_dir: PathBuf,
    /// `postgres://…` (`--store`): the store a fleet shares.
    pub store: Option<String>,
    /// `redis://…` (`--decisions`): decisions a fleet shares; else in this process.
    pub decisions: Option<String>,
    /// What to answer while Redis is unreachable (`--fail`); with `Local(())` each
    /// policy decides in this process meanwhile.
    pub fail: FailPolicy<()>,
    /// Keys kept per policy by in-process limiters (`--max-keys`).
    pub max_keys: usize,
    /// Bytes per policy's in-process limiter at the worst (`--max-policy-bytes`): its
    /// key cap is lowered to fit.
    pub max_policy_bytes: usize,
    /// `/metrics` without a token (`--metrics-open`).
    pub metrics_open: bool,
    /// The longest a request may take before it is answered 503.
    pub timeout: Duration,
    /// How often the store's change counter is polled.
    pub poll: Duration,
    /// How long a request's head may take to arrive (`--header-timeout`).
    pub header_timeout: Duration,
    /// How long a keep-alive connection may wait for its next request (`--idle-timeout`).
    pub idle_timeout: Duration,
    /// Connections open at once per listener (`--max-connections`); the excess is
    /// answered 503 and closed.
    pub max_connections: usize,
    /// How long shutdown waits for requests in flight before closing what is left
    /// (`--shutdown-timeout`).
    pub shutdown_timeout: Duration,
    /// How often gRPC pings an idle connection; one unanswered for as long closes it
    /// (`--grpc-keepalive`).
    pub grpc_keepalive: Duration,
    /// Calls at once on one gRPC connection (`--grpc-max-streams`).
    pub grpc_max_streams: u32,
    /// The most policies the store may hold (`--max-policies`).
    pub max_policies: usize,
    /// The most policies listing one app (`--max-policies-per-app`).
    pub max_policies_per_app: usize,
    /// Every rate policy in shadow mode (`--shadow`): decided and counted, always
    /// admitted, would-be denials reported.
    pub shadow: bool,
    /// Every rule of envoyproxy/ratelimit's YAML in quota mode (`--quota-mode`, their
    /// `QUOTA_MODE`): over its limit, a rule refuses a request only when every rule the
    /// request counted on is over.
    pub quota_mode: bool,
    /// envoyproxy/ratelimit's YAML (`--envoy-config`): a file, or a directory whose
    /// `*.yaml` and `*.yml` files each define one domain, answered over gRPC.
    pub envoy_config: Option<PathBuf>,
    /// Policies from files (`--policies`): a TOML policy file or Envoy's YAML, or a
    /// directory of them, watched and applied on change; read-only through the API.
    pub policies: Option<PathBuf>,
    /// Policies whose most used keys `/metrics` shows (`--key-usage`), each key's share
    /// of its limit as `sluicegate_key_usage_ratio`.
    pub key_usage: Vec<String>,
    /// How many keys `--key-usage` shows per policy (`--key-usage-max`): a bound on the
    /// gauge's series.
    pub key_usage_max: usize,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            grpc_listen: None,
            data_dir: PathBuf::from("sluicegate-data"),
            store: None,
            decisions: None,
            fail: FailPolicy::Error,
            max_keys: 100_000,
            max_policy_bytes: 256 << 20,
            metrics_open: false,
            timeout: Duration::from_secs(10),
            poll: Duration::from_millis(250),
            header_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(60),
            max_connections: 1024,
            shutdown_timeout: Duration::from_secs(10),
            grpc_keepalive: Duration::from_secs(30),
            grpc_max_streams: 100,
            max_policies: 10_000,
            max_policies_per_app: 1_000,
            shadow: false,
            quota_mode: false,
            envoy_config: None,
            policies: None,
            key_usage: Vec::new(),
            key_usage_max: 50,
        }
    }
}

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
    /// `--admin-name` is not a user name.
    #[error("--admin-name: {0}")]
    AdminName(String),
    /// A configuration file is invalid (`PATH:LINE:COLUMN: why`).
    #[error("{0}")]
    Config(String),
    /// `--init-admin` found an admin already.
    #[error("an admin exists already; ask them for a token (POST /v1/users)")]
    AdminExists,
}

/// Opens the store a configuration names.
async fn open_store(config: &Config) -> Result<Store, StoreError> {
    match &config.store {
        Some(url) => Store::open(url).await,
        None => Store::open_dir(&config.data_dir).await,
    }
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
    config: Config,
}

impl Server {
    /// Opens the store, loads it, and binds the listening socket.
    pub async fn bind(config: Config) -> Result<Self, Error> {
        let store = open_store(&config).await?;
        let keys = Keys {
            max_keys: config.max_keys,
            max_policy_bytes: config.max_policy_bytes,
        };
        let backend = match &config.decisions {
            None => Backend::Memory(keys),
            Some(url) => {
                let timeout = sluicegate_redis::DEFAULT_TIMEOUT;
                let con = sluicegate_redis::ReconnectingAsync::open(url, None, timeout)
                    .map_err(|e| Error::Decisions(e.to_string()))?;
                let coalescer = coalesce::Coalescer::start(con.clone());
                Backend::Redis {
                    con,
                    coalescer,
                    fail: config.fail.clone(),
                    keys,
                }
            }
        };
        let caps = service::Caps {
            total: config.max_policies,
            per_app: config.max_policies_per_app,
        };
        let service = Arc::new(Service::new(
            store,
            backend,
            config.metrics_open,
            caps,
            config.shadow,
            config.quota_mode,
            metrics::Metrics::with_key_usage(&config.key_usage, config.key_usage_max),
        ));
        service.reload(true).await?;
        let sources = files::Sources::of(&config);
        if sources.any() {
            let loaded = sources.load(&service.backend).map_err(Error::Config)?;
            service.set_files(loaded).await;
        }
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .map_err(|e| Error::Listen(config.listen, e))?;
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
            config,
        })
    }

    /// The address it listens on (the port chosen when `listen` asked for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().unwrap_or(self.config.listen)
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
        let poll = self.config.poll;
        // Changes made by other servers arrive through the store's change counter.
        let poller = tokio::spawn(async move {
            let mut tick = tokio::time::interval(poll);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                if let Err(e) = service.reload(false).await {
                    tracing::warn!(error = %e, "polling the store; serving the policies last read");
                }
            }
        });
        // One shutdown signal for both listeners.
        let (stop, stopped) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            shutdown.await;
            let _ = stop.send(true);
        });
        let until = |mut stopped: tokio::sync::watch::Receiver<bool>| async move {
            let _ = stopped.wait_for(|stop| *stop).await;
        };
        tracing::info!(listen = %self.local_addr(), "serving");
        let config = &self.config;
        let bounds = conn::Bounds {
            header: config.header_timeout,
            idle: config.idle_timeout,
        };
        let sources = files::Sources::of(config);
        let watcher = sources
            .any()
            .then(|| tokio::spawn(files::watch(Arc::clone(&self.service), sources)));
        let grpc_addr = self.grpc_addr();
        let grpc = self.grpc.map(|listener| {
            let gate = conn::Gate::new(listener, config.max_connections, bounds, b"");
            let incoming = futures_util::stream::unfold(gate, |gate| async {
                let conn = gate.accept().await;
                Some((Ok::<_, std::convert::Infallible>(conn), gate))
            });
            tracing::info!(listen = ?grpc_addr, "serving Envoy's rate limit service (gRPC)");
            tokio::spawn(
                tonic::transport::Server::builder()
                    .timeout(config.timeout)
                    .max_concurrent_streams(config.grpc_max_streams)
                    .http2_keepalive_interval(Some(config.grpc_keepalive))
                    .http2_keepalive_timeout(Some(config.grpc_keepalive))
                    .add_service(grpc::Rls::server(Arc::clone(&self.service)))
                    .serve_with_incoming_shutdown(incoming, until(stopped.clone())),
            )
        });
        let gate = conn::Gate::new(
            self.listener,
            config.max_connections,
            bounds,
            conn::HTTP_REFUSAL,
        );
        let app = http::router::router(Arc::clone(&self.service), config.timeout);
        conn::serve_http1(gate, app, stopped.clone(), config.shutdown_timeout).await;
        if let Some(mut grpc) = grpc {
            // tonic waits for every connection to end: bounded by the same deadline.
            match tokio::time::timeout(config.shutdown_timeout, &mut grpc).await {
                Ok(Ok(Err(e))) => tracing::error!(error = %e, "gRPC server"),
                Ok(Err(e)) => tracing::error!(error = %e, "gRPC server task"),
                Ok(Ok(Ok(()))) => {}
                Err(_) => {
                    tracing::warn!("gRPC shutdown deadline passed; closing its connections");
                    grpc.abort();
                }
            }
        }
        poller.abort();
        if let Some(watcher) = watcher {
            watcher.abort();
        }
        Ok(())
    }
}
