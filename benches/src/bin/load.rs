//! An HTTP load generator for `tollgate serve`: N keep-alive connections (64 by default)
//! each sending one request after another for a fixed time, first `GET /healthz` (the
//! floor: the same server answering without deciding), then `POST /v1/decide`, and the
//! decisions per second, p50 and p99 of each, and their ratio.
//!
//! ```text
//! cargo run --release -p tollgate-benches --bin load -- [--duration 10s] [--connections 64]
//!     [--keys 10000] [--decisions redis://127.0.0.1:6379]          # a server in this process
//! cargo run --release -p tollgate-benches --bin load -- --url http://HOST:PORT
//!     --policy api                                        # a running one (TOLLGATE_TOKEN: an app token)
//! ```
//!
//! Without `--url` it starts a `tollgate serve` in this process (its own runtime and
//! threads, a fresh embedded store, an app and a token bucket that never denies), in
//! memory or with `--decisions`.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

#[derive(Clone)]
struct Options {
    url: Option<String>,
    policy: String,
    duration: Duration,
    connections: usize,
    keys: u64,
    decisions: Option<String>,
}

fn options() -> Result<Options, String> {
    let mut options = Options {
        url: None,
        policy: "api".into(),
        duration: Duration::from_secs(10),
        connections: 64,
        keys: 10_000,
        decisions: None,
    };
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
            "--keys" => options.keys = value()?.parse().map_err(|_| "--keys N")?,
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    if options.connections == 0 || options.keys == 0 {
        return Err("--connections and --keys are at least 1".into());
    }
    Ok(options)
}

/// What one phase measured.
struct Phase {
    requests: usize,
    errors: usize,
    first_error: Option<String>,
    elapsed: Duration,
    /// Sorted latencies in microseconds.
    latencies: Vec<u32>,
}

impl Phase {
    fn per_second(&self) -> f64 {
        self.requests as f64 / self.elapsed.as_secs_f64()
    }

    fn percentile(&self, p: usize) -> f64 {
        let i = (self.latencies.len() * p / 100).min(self.latencies.len().saturating_sub(1));
        self.latencies
            .get(i)
            .map_or(0.0, |&us| f64::from(us) / 1000.0)
    }
}

/// The request a connection sends for its `n`th turn.
#[derive(Clone)]
enum Ask {
    Health,
    Decide {
        token: Arc<str>,
        policy: Arc<str>,
        keys: u64,
    },
}

impl Ask {
    fn request(&self, host: &str, n: u64) -> Request<Full<Bytes>> {
        match self {
            Self::Health => Request::get("/healthz")
                .header("host", host)
                .body(Full::new(Bytes::new())),
            Self::Decide {
                token,
                policy,
                keys,
            } => {
                let body = format!(r#"{{"policy":"{policy}","key":"k{}"}}"#, n % keys);
                Request::builder()
                    .method(Method::POST)
                    .uri("/v1/decide")
                    .header("host", host)
                    .header("authorization", format!("Bearer {token}"))
                    .header("content-type", "application/json")
                    .body(Full::new(Bytes::from(body)))
            }
        }
        .unwrap_or_default()
    }
}

/// One connection sending requests back to back until `until`: its latencies (µs) and
/// errors.
async fn connection(addr: String, ask: Ask, until: Instant, seed: u64) -> Outcome {
    let mut outcome = Outcome::default();
    let Ok(stream) = TcpStream::connect(&addr).await else {
        outcome.fail("cannot connect".into());
        return outcome;
    };
    let _ = stream.set_nodelay(true);
    let Ok((mut sender, conn)) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await
    else {
        outcome.fail("no HTTP/1.1 handshake".into());
        return outcome;
    };
    tokio::spawn(conn);
    let mut n = seed;
    while Instant::now() < until {
        n = n.wrapping_add(7919);
        let start = Instant::now();
        let failure = match sender.send_request(ask.request(&addr, n)).await {
            Ok(response) => {
                let status = response.status();
                match response.into_body().collect().await {
                    Ok(_) if status.is_success() => None,
                    Ok(body) => Some(format!(
                        "{status} {}",
                        String::from_utf8_lossy(&body.to_bytes())
                    )),
                    Err(e) => Some(e.to_string()),
                }
            }
            Err(e) => Some(e.to_string()),
        };
        match failure {
            None => outcome
                .latencies
                .push(u32::try_from(start.elapsed().as_micros()).unwrap_or(u32::MAX)),
            Some(why) => {
                outcome.fail(why);
                if sender.ready().await.is_err() {
                    break;
                }
            }
        }
    }
    outcome
}

/// What a connection saw: latencies (µs) of the answered requests, the failures and the
/// first one's reason.
#[derive(Default)]
struct Outcome {
    latencies: Vec<u32>,
    errors: usize,
    first_error: Option<String>,
}

impl Outcome {
    fn fail(&mut self, why: String) {
        self.errors += 1;
        self.first_error.get_or_insert(why);
    }
}

async fn phase(addr: &str, ask: Ask, options: &Options) -> Phase {
    let start = Instant::now();
    let until = start + options.duration;
    let tasks: Vec<_> = (0..options.connections)
        .map(|c| {
            let seed = (c as u64) * 1_000_003;
            tokio::spawn(connection(addr.to_owned(), ask.clone(), until, seed))
        })
        .collect();
    let mut all = Outcome::default();
    for task in tasks {
        match task.await {
            Ok(outcome) => {
                all.latencies.extend(outcome.latencies);
                all.errors += outcome.errors;
                if let Some(why) = outcome.first_error {
                    all.first_error.get_or_insert(why);
                }
            }
            Err(e) => all.fail(e.to_string()),
        }
    }
    let elapsed = start.elapsed();
    all.latencies.sort_unstable();
    Phase {
        requests: all.latencies.len(),
        errors: all.errors,
        first_error: all.first_error,
        elapsed,
        latencies: all.latencies,
    }
}

/// A server in this process, kept running until dropped.
struct Spawned {
    addr: String,
    token: String,
    _runtime: tokio::runtime::Runtime,
    _dir: tempfile::TempDir,
}

/// A `tollgate serve` in this process on its own runtime: its address and an app token
/// for a policy `api` that never denies (a million a second per key: within the Redis
/// scripts' range).
fn spawn_server(options: &Options) -> Result<Spawned, String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let config = tollgate_server::Config {
        data_dir: dir.path().to_path_buf(),
        listen: "127.0.0.1:0".parse().map_err(|_| "address")?,
        decisions: options.decisions.clone(),
        ..tollgate_server::Config::default()
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let (addr, token) = runtime.block_on(async {
        let admin = tollgate_server::init_admin(&config, "root")
            .await
            .map_err(|e| e.to_string())?;
        let server = tollgate_server::Server::bind(config)
            .await
            .map_err(|e| e.to_string())?;
        let addr = server.local_addr().to_string();
        tokio::spawn(server.run(std::future::pending()));
        let app = call(&addr, Method::POST, "/v1/apps", &admin, r#"{"name":"load"}"#).await?;
        let policy = r#"{"algorithm":"token-bucket","capacity":1000000,"rate":1000000,"period":"1s","apps":["load"]}"#;
        call(&addr, Method::PUT, "/v1/policies/api", &admin, policy).await?;
        let token = app["token"].as_str().unwrap_or_default().to_owned();
        Ok::<_, String>((addr, token))
    })?;
    Ok(Spawned {
        addr,
        token,
        _runtime: runtime,
        _dir: dir,
    })
}

async fn call(
    addr: &str,
    method: Method,
    path: &str,
    token: &str,
    body: &str,
) -> Result<serde_json::Value, String> {
    let stream = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    let request = Request::builder()
        .method(method)
        .uri(path)
        .header("host", addr)
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_owned())))
        .map_err(|e| e.to_string())?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| e.to_string())?;
    let status = response.status();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    if !status.is_success() {
        return Err(format!(
            "{path}: {status} {}",
            String::from_utf8_lossy(&body)
        ));
    }
    serde_json::from_slice(&body).map_err(|e| e.to_string())
}

fn main() -> ExitCode {
    let options = match options() {
        Ok(options) => options,
        Err(e) => {
            eprintln!("load: {e}");
            return ExitCode::from(2);
        }
    };
    let (addr, token, _server) = match &options.url {
        Some(url) => {
            let addr = url
                .trim_start_matches("http://")
                .trim_end_matches('/')
                .to_owned();
            let token = std::env::var("TOLLGATE_TOKEN").unwrap_or_default();
            (addr, token, None)
        }
        None => match spawn_server(&options) {
            Ok(server) => (server.addr.clone(), server.token.clone(), Some(server)),
            Err(e) => {
                eprintln!("load: cannot start the server: {e}");
                return ExitCode::from(4);
            }
        },
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("load: {e}");
            return ExitCode::from(4);
        }
    };
    let decide = Ask::Decide {
        token: token.into(),
        policy: options.policy.as_str().into(),
        keys: options.keys,
    };
    let (floor, decided) = runtime.block_on(async {
        // A short warm-up of both, then the measured phases.
        let warm = Options {
            duration: Duration::from_secs(1),
            ..options.clone()
        };
        phase(&addr, Ask::Health, &warm).await;
        phase(&addr, decide.clone(), &warm).await;
        let floor = phase(&addr, Ask::Health, &options).await;
        let decided = phase(&addr, decide, &options).await;
        (floor, decided)
    });
    println!(
        "{} connections, {} s each, decisions {}",
        options.connections,
        options.duration.as_secs(),
        options.decisions.as_deref().unwrap_or("in memory")
    );
    for (name, phase) in [("GET /healthz", &floor), ("POST /v1/decide", &decided)] {
        println!(
            "{name:<16} {:>9.0} /s  p50 {:>6.2} ms  p99 {:>6.2} ms  errors {}",
            phase.per_second(),
            phase.percentile(50),
            phase.percentile(99),
            phase.errors
        );
        if let Some(why) = &phase.first_error {
            println!("  first error: {}", why.trim_end());
        }
    }
    println!(
        "decide / healthz: {:.2}x",
        decided.per_second() / floor.per_second().max(f64::MIN_POSITIVE)
    );
    ExitCode::SUCCESS
}
