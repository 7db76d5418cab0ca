//! `sluicegate serve`: the rate-limit service (see the `sluicegate-server` crate).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use sluicegate_core::FailPolicy;
use sluicegate_server::{Config, Server};

use crate::failure::Failure;

/// `--fail`: the answer while the `--decisions` Redis is unreachable.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum FailFlag {
    /// 503: the caller decides.
    Error,
    /// Admit everything.
    Open,
    /// Deny everything.
    Closed,
    /// Decide in this process (each server enforces the limit alone meanwhile).
    Local,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Where to listen for HTTP.
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Where to serve Envoy's rate limit service (gRPC), e.g. 127.0.0.1:8081; off when
    /// not given.
    #[arg(long)]
    grpc_listen: Option<SocketAddr>,
    /// The embedded store's directory (SQLite), unless --store is given.
    #[arg(long, default_value = "sluicegate-data")]
    data_dir: PathBuf,
    /// postgres://USER@HOST:PORT/DB: the store a fleet of servers shares.
    #[arg(long)]
    store: Option<String>,
    /// redis://HOST:PORT/DB: decisions a fleet shares (else in this process).
    #[arg(long)]
    decisions: Option<String>,
    /// The answer while the --decisions Redis is unreachable.
    #[arg(long, value_enum, default_value = "error")]
    fail: FailFlag,
    /// Keys kept per policy by in-process limiters (least fresh forgotten first).
    #[arg(long, default_value_t = 100_000)]
    max_keys: usize,
    /// Memory per policy's in-process limiter at the worst (bytes, or with KiB, MiB or
    /// GiB): a policy whose keys could take more (a sliding log of a large limit) holds
    /// fewer keys than --max-keys.
    #[arg(long, default_value = "256MiB", value_parser = bytes)]
    max_policy_bytes: usize,
    /// Serve /metrics without a token (for a scraper on a trusted network).
    #[arg(long)]
    metrics_open: bool,
    /// How long a request's head may take to arrive, from its first byte (and a new
    /// connection's first byte, from its opening).
    #[arg(long, default_value = "5s", value_parser = duration)]
    header_timeout: Duration,
    /// How long a keep-alive connection may wait for its next request.
    #[arg(long, default_value = "60s", value_parser = duration)]
    idle_timeout: Duration,
    /// Connections open at once, per listener (HTTP, gRPC); the excess is answered 503
    /// and closed at once.
    #[arg(long, default_value_t = 1024)]
    max_connections: usize,
    /// On SIGTERM or Ctrl-C, how long requests in flight may take before the
    /// connections left are closed.
    #[arg(long, default_value = "10s", value_parser = duration)]
    shutdown_timeout: Duration,
    /// How often gRPC pings a connection; one ping unanswered for as long closes it.
    #[arg(long, default_value = "30s", value_parser = duration)]
    grpc_keepalive: Duration,
    /// Calls at once on one gRPC connection.
    #[arg(long, default_value_t = 100)]
    grpc_max_streams: u32,
    /// The most policies the store may hold.
    #[arg(long, default_value_t = 10_000)]
    max_policies: usize,
    /// The most policies that may list one app.
    #[arg(long, default_value_t = 1_000)]
    max_policies_per_app: usize,
    /// Every rate policy in shadow mode: decided and counted as if enforcing, always
    /// admitted, would-be denials reported (to try limits on live traffic).
    #[arg(long)]
    shadow: bool,
    /// Every rule of envoyproxy/ratelimit's YAML in quota mode, as their QUOTA_MODE:
    /// over its limit, a rule refuses a request only when every rule the request
    /// counted on is over.
    #[arg(long)]
    quota_mode: bool,
    /// envoyproxy/ratelimit's YAML, read as it is: a file, or a directory of `*.yaml`
    /// and `*.yml` files, one domain each, answered over gRPC (--grpc-listen) with their
    /// matching; the top-level `sluicegate_apps: [NAME, ...]` limits which apps may ask.
    #[arg(long, value_name = "DIR")]
    envoy_config: Option<std::path::PathBuf>,
    /// Policies from files: a TOML policy file or envoyproxy/ratelimit's YAML, or a
    /// directory of them (*.toml, *.yaml, *.yml), watched: a change applies within a
    /// second, an invalid one is refused whole (logged, counted in /metrics). The API
    /// cannot change these policies (403 naming the file).
    #[arg(long, value_name = "FILE|DIR")]
    policies: Option<std::path::PathBuf>,
    /// Show in /metrics how much of its limit each of this policy's most used keys has
    /// taken (`sluicegate_key_usage_ratio{policy,key}`); repeat for several policies.
    #[arg(long, value_name = "POLICY")]
    key_usage: Vec<String>,
    /// The most keys --key-usage shows per policy: a bound on the gauge's series.
    #[arg(long, default_value_t = 50, value_name = "N")]
    key_usage_max: usize,
    /// Create the first admin, print its token once, and exit.
    #[arg(long)]
    init_admin: bool,
    /// The first admin's name (with --init-admin).
    #[arg(long, default_value = "admin")]
    admin_name: String,
}

pub fn run(args: ServeArgs) -> Result<ExitCode, Failure> {
    let config = Config {
        listen: args.listen,
        grpc_listen: args.grpc_listen,
        data_dir: args.data_dir,
        store: args.store,
        decisions: args.decisions,
        fail: match args.fail {
            FailFlag::Error => FailPolicy::Error,
            FailFlag::Open => FailPolicy::Open,
            FailFlag::Closed => FailPolicy::Closed,
            FailFlag::Local => FailPolicy::Local(()),
        },
        max_keys: args.max_keys,
        max_policy_bytes: args.max_policy_bytes,
        metrics_open: args.metrics_open,
        header_timeout: args.header_timeout,
        idle_timeout: args.idle_timeout,
        max_connections: args.max_connections,
        shutdown_timeout: args.shutdown_timeout,
        grpc_keepalive: args.grpc_keepalive,
        grpc_max_streams: args.grpc_max_streams,
        max_policies: args.max_policies,
        max_policies_per_app: args.max_policies_per_app,
        shadow: args.shadow,
        quota_mode: args.quota_mode,
        envoy_config: args.envoy_config,
        policies: args.policies,
        key_usage: args.key_usage,
        key_usage_max: args.key_usage_max,
        ..Config::default()
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::Backend(format!("cannot start the runtime: {e}")))?;
    if args.init_admin {
        let token = runtime
            .block_on(sluicegate_server::init_admin(&config, &args.admin_name))
            .map_err(|e| Failure::Backend(e.to_string()))?;
        println!("{token}");
        return Ok(ExitCode::SUCCESS);
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    runtime.block_on(async {
        let server = Server::bind(config).await.map_err(|e| match e {
            // A file the operator wrote: bad input, like any other command's.
            sluicegate_server::Error::Config(problem) => Failure::Input(problem),
            e => Failure::Backend(e.to_string()),
        })?;
        eprintln!("sluicegate: serving on http://{}", server.local_addr());
        if let Some(grpc) = server.grpc_addr() {
            eprintln!("sluicegate: Envoy's rate limit service (gRPC) on {grpc}");
        }
        server
            .run(shutdown())
            .await
            .map_err(|e| Failure::Backend(e.to_string()))
    })?;
    Ok(ExitCode::SUCCESS)
}

/// A flag's duration (`250ms`, `5s`), as policies write them.
fn duration(text: &str) -> Result<Duration, String> {
    sluicegate_policy::parse_duration(text).map(|d| Duration::from_micros(d.0))
}

/// `65536`, `64KiB`, `256MiB`, `1GiB`.
fn bytes(text: &str) -> Result<usize, String> {
    let (digits, shift) = [("KiB", 10), ("MiB", 20), ("GiB", 30)]
        .iter()
        .find_map(|&(unit, shift)| Some((text.strip_suffix(unit)?, shift)))
        .unwrap_or((text, 0));
    digits
        .trim()
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(1 << shift))
        .filter(|&n| n > 0)
        .ok_or_else(|| format!("{text:?} is not a size (bytes, or with KiB, MiB or GiB)"))
}

/// Completes on Ctrl-C or SIGTERM: the server then finishes the requests in flight.
async fn shutdown() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(_) => {
                    let _ = interrupt.await;
                    return;
                }
            };
        tokio::select! {
            _ = interrupt => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = interrupt.await;
}
