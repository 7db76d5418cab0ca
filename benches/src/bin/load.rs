//! An HTTP load generator for `sluicegate serve`: N keep-alive connections (64 by default)
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

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, AUTHORIZATION, CONTENT_TYPE, HOST};
use hyper::{Method, Request, Uri};
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
    /// A fixed number of requests per phase instead of a duration.
    requests: Option<u64>,
    /// Only this phase (`healthz` or `decide`), with no warm-up.
    only: Option<String>,
    /// Run the server alone.
    serve: bool,
}

fn options() -> Result<Options, String> {
    let mut options = Options {
        url: None,
        policy: "api".into(),
        duration: Duration::from_secs(10),
        connections: 64,
        keys: 10_000,
        decisions: None,
        requests: None,
        only: None,
        serve: false,
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
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    if options.connections == 0 || !(1..=MAX_KEYS).contains(&options.keys) {
        return Err(format!(
            "--connections is at least 1, --keys 1 to {MAX_KEYS}"
        ));
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

/// What a connection sends, every part made once and cloned per request (a clone of
/// `Bytes` or a `HeaderValue` counts a reference), so the generator's work per request
/// is the same for both phases but for the body.
#[derive(Clone)]
struct Ask {
    method: Method,
    uri: Uri,
    host: HeaderValue,
    /// For decisions: the `Authorization` value and one body per key.
    decide: Option<(HeaderValue, Arc<[Bytes]>)>,
}

/// The most keys a run may use (their bodies are built before it).
const MAX_KEYS: u64 = 1_000_000;

impl Ask {
    fn health(host: &str) -> Result<Self, String> {
        Ok(Self {
            method: Method::GET,
            uri: Uri::from_static("/healthz"),
            host: HeaderValue::from_str(host).map_err(|e| e.to_string())?,
            decide: None,
        })
    }

    fn decide(host: &str, token: &str, policy: &str, keys: u64) -> Result<Self, String> {
        let bodies: Arc<[Bytes]> = (0..keys)
            .map(|k| Bytes::from(format!(r#"{{"policy":"{policy}","key":"k{k}"}}"#)))
            .collect();
        let token = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|e| e.to_string())?;
        Ok(Self {
            method: Method::POST,
            uri: Uri::from_static("/v1/decide"),
            decide: Some((token, bodies)),
            ..Self::health(host)?
        })
    }

    /// The key of the `n`th turn's decision.
    fn key(&self, n: u64) -> Option<u64> {
        self.decide
            .as_ref()
            .map(|(_, bodies)| n % bodies.len() as u64)
    }

    /// The request a connection sends for its `n`th turn.
    fn request(&self, n: u64) -> Request<Full<Bytes>> {
        let body = match (&self.decide, self.key(n)) {
            (Some((_, bodies)), Some(k)) => usize::try_from(k)
                .ok()
                .and_then(|k| bodies.get(k))
                .cloned()
                .unwrap_or_default(),
            _ => Bytes::new(),
        };
        let mut request = Request::new(Full::new(body));
        *request.method_mut() = self.method.clone();
        *request.uri_mut() = self.uri.clone();
        let headers = request.headers_mut();
        headers.insert(HOST, self.host.clone());
        if let Some((token, _)) = &self.decide {
            headers.insert(AUTHORIZATION, token.clone());
            headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        }
        request
    }
}

/// Reads a body to its end without keeping it.
async fn drain(mut body: Incoming) -> Result<(), hyper::Error> {
    while let Some(frame) = body.frame().await {
        frame?;
    }
    Ok(())
}

/// One HTTP/1.1 connection to `addr`.
async fn open(addr: &str) -> Result<hyper::client::conn::http1::SendRequest<Full<Bytes>>, String> {
    let stream = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("cannot connect: {e}"))?;
    let _ = stream.set_nodelay(true);
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("no HTTP/1.1 handshake: {e}"))?;
    tokio::spawn(conn);
    Ok(sender)
}

/// Sends `request` once the connection is ready; the answer's status and whole body.
async fn exchange(
    sender: &mut hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    request: Request<Full<Bytes>>,
) -> Result<(hyper::StatusCode, Bytes), String> {
    sender.ready().await.map_err(|e| e.to_string())?;
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
    Ok((status, body))
}

/// One connection sending requests back to back until `until` or `count` are answered:
/// its latencies (µs) and errors.
async fn connection(addr: String, ask: Ask, until: Instant, count: u64, seed: u64) -> Outcome {
    let mut outcome = Outcome::default();
    let mut sender = match open(&addr).await {
        Ok(sender) => sender,
        Err(why) => {
            outcome.fail(why);
            return outcome;
        }
    };
    let mut n = seed;
    let mut sent = 0;
    while sent < count && Instant::now() < until {
        sent += 1;
        n = n.wrapping_add(7919);
        // A request sent before the connection is ready again (its task has not yet
        // taken the last answer's end) is refused.
        if let Err(e) = sender.ready().await {
            outcome.fail(e.to_string());
            break;
        }
        let start = Instant::now();
        let failure = match sender.send_request(ask.request(n)).await {
            Ok(response) if response.status().is_success() => drain(response.into_body())
                .await
                .err()
                .map(|e| e.to_string()),
            Ok(response) => {
                let status = response.status();
                match response.into_body().collect().await {
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
            Some(why) => outcome.fail(why),
        }
    }
    outcome
}

/// Sends a few decisions outside the measured phases and checks their JSON: the policy
/// and key asked, a verdict and figures.
async fn check_answers(addr: &str, ask: &Ask, policy: &str) -> Result<(), String> {
    let mut sender = open(addr).await?;
    for n in [0, 1, 7919, 123_457] {
        let (status, body) = exchange(&mut sender, ask.request(n)).await?;
        let json: serde_json::Value = serde_json::from_slice(&body).map_err(|e| {
            format!(
                "{status}: not JSON ({e}): {}",
                String::from_utf8_lossy(&body)
            )
        })?;
        let key = format!("k{}", ask.key(n).unwrap_or_default());
        let fine = status.is_success()
            && json["policy"] == policy
            && json["key"] == key.as_str()
            && json["allowed"].is_boolean()
            && [
                "limit",
                "remaining",
                "retry_after_us",
                "reset_after_us",
                "delay_us",
            ]
            .iter()
            .all(|f| json[f].is_u64());
        if !fine {
            return Err(format!("unexpected answer for {key}: {status} {json}"));
        }
    }
    Ok(())
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
    // A fixed number of requests is spread over the connections, with no time limit
    // (but an hour).
    let (until, total) = match options.requests {
        Some(total) => (start + Duration::from_secs(3600), total),
        None => (start + options.duration, u64::MAX),
    };
    let connections = options.connections as u64;
    let tasks: Vec<_> = (0..connections)
        .map(|c| {
            let seed = c * 1_000_003;
            let count = total / connections + u64::from(c < total % connections);
            tokio::spawn(connection(addr.to_owned(), ask.clone(), until, count, seed))
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

/// A `sluicegate serve` in this process on its own runtime: its address and an app token
/// for a policy `api` that never denies (a million a second per key: within the Redis
/// scripts' range).
fn spawn_server(options: &Options) -> Result<Spawned, String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let config = sluicegate_server::Config {
        data_dir: dir.path().to_path_buf(),
        listen: "127.0.0.1:0".parse().map_err(|_| "address")?,
        decisions: options.decisions.clone(),
        ..sluicegate_server::Config::default()
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("sluicegate-serve")
        .build()
        .map_err(|e| e.to_string())?;
    let (addr, token) = runtime.block_on(async {
        let admin = sluicegate_server::init_admin(&config, "root")
            .await
            .map_err(|e| e.to_string())?;
        let server = sluicegate_server::Server::bind(config)
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
    let mut sender = open(addr).await?;
    let request = Request::builder()
        .method(method)
        .uri(path)
        .header("host", addr)
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_owned())))
        .map_err(|e| e.to_string())?;
    let (status, body) = exchange(&mut sender, request).await?;
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
            let token = std::env::var("SLUICEGATE_TOKEN").unwrap_or_default();
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
    if options.serve {
        println!("{addr} {token}");
        loop {
            std::thread::park();
        }
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("load")
        .build()
    {
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
            phase(&addr, health.clone(), &warm).await;
            phase(&addr, decide.clone(), &warm).await;
        }
        if only != Some("decide") {
            phases.push(("GET /healthz", phase(&addr, health, &options).await));
        }
        if only != Some("healthz") {
            phases.push(("POST /v1/decide", phase(&addr, decide, &options).await));
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
    for (name, phase) in &phases {
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
    if let [(_, floor), (_, decided)] = &phases[..] {
        println!(
            "decide / healthz: {:.2}x",
            decided.per_second() / floor.per_second().max(f64::MIN_POSITIVE)
        );
    }
    ExitCode::SUCCESS
}
