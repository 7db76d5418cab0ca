//! A load generator for `sluicegate serve`, in two modes.
//!
//! Beside a peer (`--protocol`, see `side.rs`): servers started as processes of their own,
//! row by row, each measured for decisions a second, latency and its CPU per decision:
//!
//! ```text
//! cargo run --release -p sluicegate-benches --bin load -- --protocol grpc|http
//!     --backend memory|redis|redis://… [--peer limitador] [--duration 10] [--json]
//!     [--connections N] [--in-flight M] [--keys K] [--rate R] [--otlp]
//! ```
//!
//! Envoy's quota protocol (`--protocol rlqs`, see `quota.rs`): proxies' streams reporting
//! every 5 s to one server process, its CPU per report and memory per bucket, beside RLS.
//!
//! `--otlp` starts an OTLP trace receiver in this process and has the servers export
//! to it (`OTEL_TRACES_SAMPLER=traceidratio OTEL_TRACES_SAMPLER_ARG=0.01` to sample).
//!
//! Alone (no `--protocol`): an HTTP load generator, N keep-alive connections (64 by default)
//! each sending one request after another for a fixed time, first `GET /healthz` (the
//! floor: the same server answering without deciding), then `POST /v1/decide`, and the
//! decisions per second, p50 and p99 of each, and their ratio.
//!
//! ```text
//! cargo run --release -p sluicegate-benches --bin load -- [--duration 10s] [--connections 64]
//!     [--keys 10000] [--decisions redis://127.0.0.1:6379]          # a server in this process
//! cargo run --release -p sluicegate-benches --bin load -- --url http://HOST:PORT
//!     --policy api                                        # a running one (SLUICEGATE_TOKEN: an app token)
//! load --serve [--decisions redis://…]     # only the server: prints `ADDR TOKEN`, serves until killed
//! load --url … --requests 200000 --only decide   # a fixed number of requests, one phase
//! ```
//!
//! Without `--url` it starts a `sluicegate serve` in this process (its own runtime and
//! threads, named `sluicegate-serve`, a fresh embedded store, an app and a token bucket
//! that never denies), in memory or with `--decisions`. `--serve` runs that server alone,
//! so a profiler (`perf stat -p`) counts the server and not the generator.
//!
//! Both phases cost the generator alike: requests are built from values made once
//! (bodies and headers are `Bytes`, cloned per request) and answers are drained
//! unparsed, only their status checked; a few decisions' JSON is checked before the
//! measured phases.

mod grpc;
mod http;
mod measure;
mod procs;
mod quota;
mod side;

use std::process::ExitCode;
use std::time::Duration;

use http::{check_answers, phase, Ask, MAX_KEYS};
use measure::{Load, Phase};

/// The protocol of the side-by-side rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Protocol {
    Grpc,
    Http,
    /// Envoy's quota streams (`quota.rs`).
    Rlqs,
}

#[derive(Clone)]
struct Options {
    url: Option<String>,
    policy: String,
    duration: Duration,
    connections: usize,
    keys: u64,
    decisions: Option<String>,
    /// A fixed number of requests per phase instead of a duration.
    requests: Option<u64>,
    /// Only this phase (`healthz` or `decide`), with no warm-up.
    only: Option<String>,
    /// Run the server alone.
    serve: bool,
    /// Side by side with separate server processes, over this protocol.
    protocol: Option<Protocol>,
    /// `redis` (a redis-server started for the run) or `redis://…`; else in memory.
    backend: Option<String>,
    /// limitador's rows too (`--peer limitador`, from `LIMITADOR_SERVER`).
    peer: bool,
    /// One JSON object per row.
    json: bool,
    /// gRPC calls in flight per connection.
    in_flight: usize,
    /// An open loop: this many requests a second in all.
    rate: Option<f64>,
    /// An OTLP receiver in this process, which the servers started export traces to.
    otlp: bool,
    /// Quota streams (proxies), buckets each, and requests a second in every bucket.
    streams: u64,
    buckets: u64,
    bucket_rate: u64,
}

impl Options {
    /// How a phase sends: one worker per connection over HTTP/1.1, `in_flight` per
    /// connection over gRPC.
    fn load(&self) -> Load {
        let per = if self.protocol == Some(Protocol::Grpc) {
            self.in_flight
        } else {
            1
        };
        Load {
            workers: self.connections * per,
            duration: self.duration,
            requests: self.requests,
            rate: self.rate,
        }
    }
}

/// The command line's options, checked; the defaults where a flag is absent.
fn options() -> Result<Options, String> {
    let mut options = Options {
        url: None,
        policy: "api".into(),
        duration: Duration::from_secs(10),
        connections: 0,
        keys: 10_000,
        decisions: None,
        requests: None,
        only: None,
        serve: false,
        protocol: None,
        backend: None,
        peer: false,
        json: false,
        in_flight: 16,
        rate: None,
        otlp: false,
        streams: 1000,
        buckets: 50,
        bucket_rate: 10,
    };
    let mut keys_given = false;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--url" => options.url = Some(value()?),
            "--policy" => options.policy = value()?,
            "--decisions" => options.decisions = Some(value()?),
            "--duration" => {
                let text = value()?;
                let seconds: u64 = text
                    .trim_end_matches('s')
                    .parse()
                    .map_err(|_| format!("--duration is whole seconds: {text}"))?;
                options.duration = Duration::from_secs(seconds.max(1));
            }
            "--connections" => {
                options.connections = value()?.parse().map_err(|_| "--connections N")?;
            }
            "--keys" => {
                options.keys = value()?.parse().map_err(|_| "--keys N")?;
                keys_given = true;
            }
            "--streams" => options.streams = value()?.parse().map_err(|_| "--streams N")?,
            "--buckets" => options.buckets = value()?.parse().map_err(|_| "--buckets N")?,
            "--bucket-rate" => {
                options.bucket_rate = value()?.parse().map_err(|_| "--bucket-rate R")?;
            }
            "--requests" => {
                options.requests = Some(value()?.parse().map_err(|_| "--requests N")?);
            }
            "--only" => {
                let phase = value()?;
                if !matches!(phase.as_str(), "healthz" | "decide") {
                    return Err(format!("--only healthz|decide, not {phase}"));
                }
                options.only = Some(phase);
            }
            "--serve" => options.serve = true,
            "--protocol" => {
                options.protocol = Some(match value()?.as_str() {
                    "grpc" => Protocol::Grpc,
                    "http" => Protocol::Http,
                    "rlqs" => Protocol::Rlqs,
                    other => return Err(format!("--protocol grpc|http|rlqs, not {other}")),
                });
            }
            "--backend" => {
                let backend = value()?;
                options.backend = (backend != "memory").then_some(backend);
            }
            "--peer" => {
                let peer = value()?;
                if peer != "limitador" {
                    return Err(format!("--peer limitador, not {peer}"));
                }
                options.peer = true;
            }
            "--json" => options.json = true,
            "--in-flight" => options.in_flight = value()?.parse().map_err(|_| "--in-flight M")?,
            "--rate" => options.rate = Some(value()?.parse().map_err(|_| "--rate R")?),
            "--otlp" => options.otlp = true,
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    if options.connections == 0 {
        // HTTP/1.1 has one request in flight per connection; gRPC many; quota streams
        // ten to a connection.
        options.connections = match options.protocol {
            Some(Protocol::Grpc) => 4,
            Some(Protocol::Rlqs) => usize::try_from(options.streams.div_ceil(10)).unwrap_or(1),
            _ => 64,
        };
    }
    if options.protocol == Some(Protocol::Rlqs) && !keys_given {
        // Every proxy holds the same buckets.
        options.keys = options.buckets;
    }
    if options.streams == 0 || options.buckets == 0 {
        return Err("--streams and --buckets are at least 1".into());
    }
    if options.in_flight == 0 || !(1..=MAX_KEYS).contains(&options.keys) {
        return Err(format!(
            "--connections and --in-flight are at least 1, --keys 1 to {MAX_KEYS}"
        ));
    }
    if let Some(rate) = options.rate {
        // Each worker sends every `workers / rate` seconds; a step past an hour (or not
        // a time at all: a rate of 0, negative, NaN) would overflow the schedule's
        // instants or sleep past any run.
        let workers = options.load().workers;
        let step = Duration::try_from_secs_f64(workers as f64 / rate);
        if !step.is_ok_and(|step| step <= Duration::from_secs(3600)) {
            return Err(format!(
                "--rate is requests a second, at least one an hour for each of {workers} senders, not {rate}"
            ));
        }
    }
    Ok(options)
}

/// A multi-threaded runtime whose threads are named `name`.
fn runtime(name: &str) -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name(name)
        .build()
        .map_err(|e| e.to_string())
}

/// A server in this process, kept running until dropped.
struct Spawned {
    addr: String,
    token: String,
    _runtime: tokio::runtime::Runtime,
    _dir: tempfile::TempDir,
}

/// A `sluicegate serve` in this process on its own runtime: its address and an app token
/// for a policy `api` that never denies ([`procs::TOKEN_BUCKET`]).
fn spawn_server(options: &Options) -> Result<Spawned, String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let config = sluicegate_server::Config {
        data_dir: dir.path().to_path_buf(),
        listen: "127.0.0.1:0".parse().map_err(|_| "address")?,
        decisions: options.decisions.clone(),
        ..sluicegate_server::Config::default()
    };
    let runtime = runtime("sluicegate-serve")?;
    let (addr, token) = runtime.block_on(async {
        let admin = sluicegate_server::init_admin(&config, "root")
            .await
            .map_err(|e| e.to_string())?;
        let server = sluicegate_server::Server::bind(config)
            .await
            .map_err(|e| e.to_string())?;
        let addr = server.local_addr().to_string();
        tokio::spawn(server.run(std::future::pending()));
        let token = procs::provision(&addr, &admin, &[("api", procs::TOKEN_BUCKET)]).await?;
        Ok::<_, String>((addr, token))
    })?;
    Ok(Spawned {
        addr,
        token,
        _runtime: runtime,
        _dir: dir,
    })
}

fn main() -> ExitCode {
    let options = match options() {
        Ok(options) => options,
        Err(e) => {
            eprintln!("load: {e}");
            return ExitCode::from(2);
        }
    };
    // Kept for the run: the servers started below inherit its endpoint (the sampler
    // from OTEL_TRACES_SAMPLER and _ARG as given).
    let _receiver = options.otlp.then(|| {
        let receiver = sluicegate_test_support::otlp::Receiver::start();
        std::env::set_var("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint());
        receiver
    });
    match options.protocol {
        Some(Protocol::Rlqs) => return quota::run(&options),
        Some(_) => return side::run(&options),
        None => {}
    }
    alone(&options)
}

/// The mode without `--protocol`: `GET /healthz` then `POST /v1/decide` on one server,
/// started in this process unless `--url` names one.
fn alone(options: &Options) -> ExitCode {
    let (addr, token, _server) = match &options.url {
        Some(url) => {
            let addr = url
                .trim_start_matches("http://")
                .trim_end_matches('/')
                .to_owned();
            let token = std::env::var("SLUICEGATE_TOKEN").unwrap_or_default();
            (addr, token, None)
        }
        None => match spawn_server(options) {
            Ok(server) => (server.addr.clone(), server.token.clone(), Some(server)),
            Err(e) => {
                eprintln!("load: cannot start the server: {e}");
                return ExitCode::from(4);
            }
        },
    };
    if options.serve {
        println!("{addr} {token}");
        loop {
            std::thread::park();
        }
    }
    let runtime = match runtime("load") {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("load: {e}");
            return ExitCode::from(4);
        }
    };
    let asks = Ask::health(&addr).and_then(|health| {
        Ok((
            health,
            Ask::decide(&addr, &token, &options.policy, options.keys)?,
        ))
    });
    let (health, decide) = match asks {
        Ok(asks) => asks,
        Err(e) => {
            eprintln!("load: {e}");
            return ExitCode::from(2);
        }
    };
    let only = options.only.as_deref();
    let phases = runtime.block_on(async {
        check_answers(&addr, &decide, &options.policy).await?;
        let mut phases = Vec::new();
        if only.is_none() {
            // A short warm-up of both, then the measured phases.
            let warm = Options {
                duration: Duration::from_secs(1),
                requests: None,
                ..options.clone()
            };
            phase(&addr, health.clone(), warm.load()).await;
            phase(&addr, decide.clone(), warm.load()).await;
        }
        if only != Some("decide") {
            phases.push(("GET /healthz", phase(&addr, health, options.load()).await));
        }
        if only != Some("healthz") {
            phases.push((
                "POST /v1/decide",
                phase(&addr, decide, options.load()).await,
            ));
        }
        Ok::<_, String>(phases)
    });
    let phases = match phases {
        Ok(phases) => phases,
        Err(e) => {
            eprintln!("load: the decisions' answers: {e}");
            return ExitCode::from(3);
        }
    };
    print_phases(options, &phases);
    ExitCode::SUCCESS
}

/// Each phase's figures, then decide's rate over healthz's when both ran.
fn print_phases(options: &Options, phases: &[(&str, Phase)]) {
    match options.requests {
        Some(n) => println!("{} connections, {n} requests a phase", options.connections),
        None => println!(
            "{} connections, {} s each",
            options.connections,
            options.duration.as_secs()
        ),
    }
    println!(
        "decisions {}",
        options.decisions.as_deref().unwrap_or("in memory")
    );
    for (name, phase) in phases {
        println!(
            "{name:<16} {:>9.0} /s  p50 {:>6.2} ms  p99 {:>6.2} ms  errors {}",
            phase.per_second(),
            f64::from(phase.percentile(500)) / 1000.0,
            f64::from(phase.percentile(990)) / 1000.0,
            phase.errors
        );
        if let Some(why) = &phase.first_error {
            println!("  first error: {}", why.trim_end());
        }
    }
    if let [(_, floor), (_, decided)] = phases {
        println!(
            "decide / healthz: {:.2}x",
            decided.per_second() / floor.per_second().max(f64::MIN_POSITIVE)
        );
    }
}
