//! Real servers on loopback for the tests: `sluicegate serve` in this process on a free
//! port, a throwaway PostgreSQL cluster (`initdb` + `pg_ctl`), a `redis-server`, and a
//! small HTTP client.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{HeaderMap, Method, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;
use sluicegate_server::{Config, Server};

pub use sluicegate_test_support::free_port;

mod rls;
pub use rls::*;
mod raw;
pub use raw::*;
mod rlqs;
pub use rlqs::*;

/// A running `sluicegate serve`, stopped (gracefully) when dropped.
pub struct TestServer {
    pub addr: SocketAddr,
    /// Envoy's rate limit service, when the configuration asked for it.
    pub grpc: Option<SocketAddr>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
    _dir: Option<tempfile::TempDir>,
}

impl TestServer {
    /// A server on the embedded store in a fresh directory, and its first admin's token.
    pub async fn start() -> (Self, String) {
        Self::start_with(config()).await
    }

    /// [`TestServer::start`] with `config` (its data directory replaced by a fresh one).
    pub async fn start_with(config: Config) -> (Self, String) {
        let dir = tempfile::tempdir().expect("temporary directory");
        let config = Config {
            data_dir: dir.path().to_path_buf(),
            ..config
        };
        let admin = sluicegate_server::init_admin(&config, "root")
            .await
            .expect("first admin");
        let mut server = Self::with(config).await;
        server._dir = Some(dir);
        (server, admin)
    }

    /// A server with `config` (its `listen` replaced by a free port).
    pub async fn with(config: Config) -> Self {
        let server = Server::bind(Config {
            listen: "127.0.0.1:0".parse().expect("address"),
            grpc_listen: config
                .grpc_listen
                .map(|_| "127.0.0.1:0".parse().expect("address")),
            ..config
        })
        .await
        .expect("server starts");
        let addr = server.local_addr();
        let grpc = server.grpc_addr();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            server
                .run(async {
                    let _ = stopped.await;
                })
                .await
                .expect("server runs");
        });
        Self {
            addr,
            grpc,
            stop: Some(stop),
            task: Some(task),
            _dir: None,
        }
    }

    /// Stops the server and waits until it has.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// The tests' configuration: fast polling.
pub fn config() -> Config {
    Config {
        poll: Duration::from_millis(100),
        ..Config::default()
    }
}

/// The tests' configuration with decisions kept in `redis`.
pub fn in_redis(redis: &Redis) -> Config {
    Config {
        decisions: Some(redis.url()),
        ..config()
    }
}

/// The tests' configuration answering Envoy's YAML `yaml` over gRPC too, and the YAML's
/// directory (kept while the server runs).
pub fn envoy_yaml(yaml: &str) -> (Config, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let file = dir.path().join("envoy.yaml");
    std::fs::write(&file, yaml).expect("the YAML written");
    let config = Config {
        grpc_listen: Some("127.0.0.1:0".parse().expect("address")),
        envoy_config: Some(file),
        ..config()
    };
    (config, dir)
}

/// Why a server does not start on Envoy's YAML at `path` (a file, or a directory of
/// them), its data in `dir`.
pub async fn envoy_refused(dir: &Path, path: PathBuf) -> String {
    let refused = Server::bind(Config {
        listen: "127.0.0.1:0".parse().expect("address"),
        data_dir: dir.join("data"),
        envoy_config: Some(path),
        ..config()
    })
    .await
    .expect_err("the start is refused");
    refused.to_string()
}

/// Two servers on the store (and decision backend) of `config`: its first admin's
/// token too.
pub async fn two_servers(config: Config) -> (TestServer, TestServer, String) {
    let admin = sluicegate_server::init_admin(&config, "root")
        .await
        .expect("first admin");
    let a = TestServer::with(config.clone()).await;
    let b = TestServer::with(config).await;
    (a, b, admin)
}

/// An answer: status, headers and the body as JSON (`Value::Null` if it is not JSON,
/// the text in `text`).
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub json: Value,
    pub text: String,
}

/// Sends one request: `token` as a bearer token, `body` as JSON, `extra` headers.
pub async fn call(
    method: Method,
    url: &str,
    token: Option<&str>,
    body: Option<&str>,
    extra: &[(&str, &str)],
) -> Answer {
    let client: Client<_, Full<Bytes>> =
        Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut request = hyper::Request::builder().method(method).uri(url);
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    if body.is_some() {
        request = request.header("content-type", "application/json");
    }
    for (name, value) in extra {
        request = request.header(*name, *value);
    }
    let request = request
        .body(Full::new(Bytes::from(body.unwrap_or("").to_owned())))
        .expect("request");
    let response = client.request(request).await.expect("the server answers");
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    let text = String::from_utf8_lossy(&bytes).into_owned();
    Answer {
        status,
        headers,
        json: serde_json::from_str(&text).unwrap_or(Value::Null),
        text,
    }
}

/// A request without a body.
pub async fn send(method: Method, url: &str, token: &str) -> Answer {
    call(method, url, Some(token), None, &[]).await
}

pub async fn get(url: &str, token: &str) -> Answer {
    send(Method::GET, url, token).await
}

pub async fn post(url: &str, token: &str, body: &str) -> Answer {
    call(Method::POST, url, Some(token), Some(body), &[]).await
}

pub async fn put(url: &str, token: &str, body: &str, version: Option<i64>) -> Answer {
    conditional(Method::PUT, url, token, Some(body), version).await
}

pub async fn delete(url: &str, token: &str, version: Option<i64>) -> Answer {
    conditional(Method::DELETE, url, token, None, version).await
}

/// A request under `If-Match: "version"`, if a version is given.
async fn conditional(
    method: Method,
    url: &str,
    token: &str,
    body: Option<&str>,
    version: Option<i64>,
) -> Answer {
    let tag = version.map(|v| format!("\"{v}\""));
    let extra: Vec<(&str, &str)> = tag.iter().map(|t| ("if-match", t.as_str())).collect();
    call(method, url, Some(token), body, &extra).await
}

/// The value of metric `name` for `policy` in the Prometheus text `metrics`.
pub fn metric(metrics: &str, name: &str, policy: &str) -> u64 {
    let series = format!("{name}{{policy=\"{policy}\"}} ");
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(&series))
        .and_then(|value| value.parse().ok())
        .unwrap_or_else(|| panic!("no {series} in {metrics}"))
}

/// The values of the metrics `(name, policy)` that `/metrics` shows `token` now.
pub async fn metric_values(server: &TestServer, token: &str, series: &[(&str, &str)]) -> Vec<u64> {
    let text = get(&server.url("/metrics"), token).await.text;
    series
        .iter()
        .map(|(name, policy)| metric(&text, name, policy))
        .collect()
}

/// The policy `body` (a JSON object) made a shadow.
pub fn shadow(body: &str) -> String {
    format!(
        r#"{},"shadow":true}}"#,
        body.trim_end().trim_end_matches('}')
    )
}

/// Creates policy `name` from its JSON `body` as `admin`.
pub async fn create_policy(server: &TestServer, admin: &str, name: &str, body: &str) {
    let answer = put(
        &server.url(&format!("/v1/policies/{name}")),
        admin,
        body,
        None,
    )
    .await;
    assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.text);
}

/// Creates an app; its token.
pub async fn app(server: &TestServer, admin: &str, name: &str) -> String {
    let answer = post(
        &server.url("/v1/apps"),
        admin,
        &format!(r#"{{"name":"{name}"}}"#),
    )
    .await;
    assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.text);
    answer.json["token"].as_str().expect("token").to_owned()
}

/// Creates a user with `roles` (JSON object); its token.
pub async fn user(server: &TestServer, admin: &str, name: &str, roles: &str) -> String {
    let answer = post(
        &server.url("/v1/users"),
        admin,
        &format!(r#"{{"name":"{name}","roles":{roles}}}"#),
    )
    .await;
    assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.text);
    answer.json["token"].as_str().expect("token").to_owned()
}

/// `n` requests made at once, request `i` by `request(i)`; their answers, in order.
pub async fn at_once<F, Fut>(n: usize, request: F) -> Vec<Answer>
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = Answer> + Send + 'static,
{
    let tasks: Vec<_> = (0..n).map(|i| tokio::spawn(request(i))).collect();
    let mut answers = Vec::with_capacity(n);
    for task in tasks {
        answers.push(task.await.expect("request task"));
    }
    answers
}

/// Polls `check` every 20 ms until it holds or `within` passed; whether it held.
pub async fn eventually<F, Fut>(within: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    loop {
        if check().await {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A throwaway PostgreSQL cluster on a free loopback port, stopped when dropped.
pub struct Postgres {
    pub port: u16,
    dir: PathBuf,
    bin: PathBuf,
}

/// PostgreSQL's programs: `pg_config --bindir`, else Debian's versioned directory.
fn pg_bin() -> PathBuf {
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output() {
        let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if dir.join("initdb").exists() {
            return dir;
        }
    }
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("PostgreSQL installed (scripts/test.sh installs it)")
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|p| p.join("initdb").exists())
        .collect();
    versions.sort();
    versions.pop().expect("a PostgreSQL with initdb")
}

/// Whether this process runs as root (PostgreSQL refuses to): then its programs run as
/// the `postgres` user the package creates.
fn as_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

impl Postgres {
    /// Creates and starts a cluster (trust authentication, user `postgres`).
    pub fn start() -> Self {
        let port = free_port();
        let dir = std::env::temp_dir().join(format!("sluicegate-pg-{port}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("cluster directory");
        let pg = Self {
            port,
            dir,
            bin: pg_bin(),
        };
        if as_root() {
            let ok = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(&pg.dir)
                .status()
                .expect("chown");
            assert!(ok.success());
        }
        pg.run(
            "initdb",
            &[
                "-D",
                &pg.data(),
                "-U",
                "postgres",
                "--auth=trust",
                "--no-sync",
                "-E",
                "UTF8",
            ],
        );
        pg.restart();
        pg
    }

    fn data(&self) -> String {
        self.dir.join("data").to_string_lossy().into_owned()
    }

    fn run(&self, program: &str, args: &[&str]) {
        let path = self.bin.join(program);
        let mut command = if as_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&path);
            c
        } else {
            Command::new(&path)
        };
        let out = command
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("{program}: {e}"));
        assert!(
            out.status.success(),
            "{program} {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Starts (again) on the same port; returns once it accepts connections.
    pub fn restart(&self) {
        let options = format!(
            "-p {} -c listen_addresses=127.0.0.1 -c unix_socket_directories={} -c fsync=off",
            self.port,
            self.dir.display()
        );
        let log = self.dir.join("log").to_string_lossy().into_owned();
        self.run(
            "pg_ctl",
            &[
                "-D",
                &self.data(),
                "-o",
                &options,
                "-l",
                &log,
                "-w",
                "start",
            ],
        );
    }

    /// Stops it at once (`immediate`: like a crash; connections drop).
    pub fn kill(&self) {
        self.run(
            "pg_ctl",
            &["-D", &self.data(), "-m", "immediate", "-w", "stop"],
        );
    }

    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let _ = Command::new(if as_root() { "runuser" } else { "true" })
            .args(if as_root() {
                vec!["-u", "postgres", "--"]
            } else {
                vec![]
            })
            .arg(self.bin.join("pg_ctl"))
            .args(["-D", &self.data(), "-m", "immediate", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A `redis-server` without persistence on a free port, killed when dropped.
pub use sluicegate_test_support::Server as Redis;

/// The policy entries of an audit answer (account changes, `app.…` and `user.…`, left
/// out).
pub fn policy_entries(audit: &Answer) -> Vec<Value> {
    audit.json["entries"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["action"].as_str().is_some_and(|a| !a.contains('.')))
        .cloned()
        .collect()
}
