//! `sluicegate serve`: the rate-limit service (see the `sluicegate-server` crate).

use std::process::ExitCode;

use clap::Args;
use sluicegate_server::{Config, Server, Telemetry};

use crate::failure::Failure;

/// `sluicegate serve`: the server's flags (each also an environment variable), and
/// the first admin's creation.
#[derive(Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    config: Config,
    /// Create the first admin, print its token once, and exit.
    #[arg(long, env = "SLUICEGATE_INIT_ADMIN", hide_env_values = true)]
    init_admin: bool,
    /// The first admin's name (with --init-admin).
    #[arg(
        long,
        env = "SLUICEGATE_ADMIN_NAME",
        hide_env_values = true,
        default_value = "admin"
    )]
    admin_name: String,
    /// How logs are written to standard error: text for people, or JSON lines for a
    /// log pipeline.
    #[arg(
        long,
        env = "SLUICEGATE_LOG_FORMAT",
        hide_env_values = true,
        value_enum,
        default_value = "text"
    )]
    log_format: LogFormat,
}

/// `--log-format`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum LogFormat {
    /// One line per event, coloured on a terminal.
    Text,
    /// One JSON object per line.
    Json,
}

/// What `serve --help` says of traces, read from OpenTelemetry's own variables.
pub const TRACES_HELP: &str =
    "Traces: exported over OTLP/gRPC when OTEL_EXPORTER_OTLP_ENDPOINT (or \
OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, or OTEL_TRACES_EXPORTER=otlp) is set; also read: \
OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG, \
OTEL_EXPORTER_OTLP_TIMEOUT, OTEL_EXPORTER_OTLP_HEADERS, OTEL_SDK_DISABLED.";

pub fn run(args: ServeArgs) -> Result<ExitCode, Failure> {
    let config = args.config;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::Backend(format!("cannot start the runtime: {e}")))?;
    if args.init_admin {
        let token = runtime
            .block_on(sluicegate_server::init_admin(&config, &args.admin_name))
            .map_err(failure)?;
        println!("{token}");
        return Ok(ExitCode::SUCCESS);
    }
    let logs = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr);
    match args.log_format {
        LogFormat::Text => logs
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
        LogFormat::Json => logs.json().init(),
    }
    let served = serve(&runtime, config, args.log_format);
    match (served, args.log_format) {
        (Ok(()), _) => Ok(ExitCode::SUCCESS),
        // A log pipeline reads stderr as JSON lines: the fatal error is one too.
        (Err(failure), LogFormat::Json) => {
            let (code, message) = failure.exit();
            if let Some(message) = message {
                tracing::error!(exit_code = code, "{message}");
            }
            Ok(ExitCode::from(code))
        }
        (Err(failure), LogFormat::Text) => Err(failure),
    }
}

/// Serves until a signal, exporting traces if the environment asks.
fn serve(
    runtime: &tokio::runtime::Runtime,
    config: sluicegate_server::Config,
    format: LogFormat,
) -> Result<(), Failure> {
    let traces = {
        let _runtime = runtime.enter();
        Telemetry::from_env().map_err(|e| Failure::Input(e.to_string()))?
    };
    let served = runtime.block_on(async {
        let server = Server::bind(config).await.map_err(failure)?;
        // For people: JSON logs say it in the `serving` event.
        if let LogFormat::Text = format {
            eprintln!("sluicegate: serving on http://{}", server.local_addr());
            if let Some(grpc) = server.grpc_addr() {
                eprintln!("sluicegate: Envoy's rate limit service (gRPC) on {grpc}");
            }
        }
        server.run(shutdown()).await.map_err(failure)
    });
    if let Some(traces) = traces {
        traces.shutdown();
    }
    served
}

/// A server's error as the CLI's: what the operator wrote (a file, a flag) is bad input,
/// like any other command's; the rest, a backend failing.
fn failure(e: sluicegate_server::Error) -> Failure {
    use sluicegate_server::Error;
    match e {
        e @ (Error::Files(_)
        | Error::NoGrpc
        | Error::Decisions(_)
        | Error::StoreUrl(_)
        | Error::AdminName(_)) => Failure::Input(e.to_string()),
        e => Failure::Backend(e.to_string()),
    }
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
