//! The servers of the side-by-side rows, each a process of its own so that its CPU time
//! is its own: `sluicegate serve` (the workspace's binary) and `limitador-server` (the
//! binary in `LIMITADOR_SERVER`), and the CPU time a process has used.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hyper::Method;

use crate::http::call;

/// The CPU time (user + system, µs) process `pid` has used, from `/proc/PID/stat`.
pub fn cpu_us(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command's `(name)`, which may hold spaces: state is the 3rd
    // field, utime the 14th and stime the 15th.
    let mut fields = stat.rsplit_once(')')?.1.split_whitespace().skip(11);
    let user: u64 = fields.next()?.parse().ok()?;
    let system: u64 = fields.next()?.parse().ok()?;
    // Linux reports clock ticks of USER_HZ, 100 a second on every architecture it runs.
    Some((user + system) * 10_000)
}

/// The resident memory (bytes) of process `pid`, from `/proc/PID/status`.
pub fn rss_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix("VmRSS:"))?;
    let kib: u64 = line.trim().trim_end_matches("kB").trim().parse().ok()?;
    Some(kib * 1024)
}

/// A free loopback port (nothing listens there right now).
fn free_port() -> Result<u16, String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    Ok(listener.local_addr().map_err(|e| e.to_string())?.port())
}

/// A server process, killed when dropped, and its two addresses.
pub struct Running {
    child: Child,
    pub http: String,
    pub grpc: String,
    /// The app token its requests carry (none for a peer without tokens).
    pub token: String,
    _dir: tempfile::TempDir,
}

impl Running {
    /// Its process id, whose CPU time [`cpu_us`] reads.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Starts `command` (told to listen on the two addresses by `listen`) and waits until
    /// both accept connections.
    fn start(
        mut command: Command,
        dir: tempfile::TempDir,
        listen: impl FnOnce(&mut Command, &str, &str),
    ) -> Result<Self, String> {
        let (http, grpc) = (
            format!("127.0.0.1:{}", free_port()?),
            format!("127.0.0.1:{}", free_port()?),
        );
        listen(&mut command, &http, &grpc);
        let child = command
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start {:?}: {e}", command.get_program()))?;
        let mut running = Self {
            child,
            http,
            grpc,
            token: String::new(),
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        for addr in [running.http.clone(), running.grpc.clone()] {
            while TcpStream::connect(&addr).is_err() {
                if let Ok(Some(status)) = running.child.try_wait() {
                    return Err(format!("{:?} exited: {status}", command.get_program()));
                }
                if Instant::now() > deadline {
                    return Err(format!(
                        "{:?} not listening on {addr}",
                        command.get_program()
                    ));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Ok(running)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The workspace's `sluicegate` binary: `SLUICEGATE_BIN`, else beside this program
/// (`cargo build --release -p sluicegate` puts it there).
pub fn sluicegate_bin() -> Result<PathBuf, String> {
    let path = match std::env::var_os("SLUICEGATE_BIN") {
        Some(path) => PathBuf::from(path),
        None => std::env::current_exe()
            .map_err(|e| e.to_string())?
            .with_file_name("sluicegate"),
    };
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!(
            "no sluicegate binary at {} (cargo build --release -p sluicegate, or set SLUICEGATE_BIN)",
            path.display()
        ))
    }
}

/// A token bucket for the app `load` that never denies it (a million a second per key:
/// within the Redis scripts' range).
pub const TOKEN_BUCKET: &str = r#"{"algorithm":"token-bucket","capacity":1000000,"rate":1000000,"period":"1s","apps":["load"]}"#;

/// The policies both servers get, named as the gRPC domain and limitador's namespace:
/// a fixed window (what limitador has) and sluicegate's token bucket, each a million a
/// second per key, and the native twin of `cel_3_limits` ([`LIMITADOR_FILES`]): a
/// composite of its three fixed windows (a second's, a minute's and an hour's).
pub const POLICIES: [(&str, &str); 3] = [
    (
        "bench",
        r#"{"algorithm":"fixed-window","limit":1000000,"period":"1s","apps":["load"]}"#,
    ),
    ("bench_tb", TOKEN_BUCKET),
    (
        "bench_3",
        r#"{"algorithm":"composite","limits":[{"algorithm":"fixed-window","limit":1000000,"period":"1s"},{"algorithm":"fixed-window","limit":1000000000,"period":"1m"},{"algorithm":"fixed-window","limit":1000000000,"period":"1h"}],"apps":["load"]}"#,
    ),
];

/// Creates the app `load` on the server at `http` with the `admin` token and puts
/// `policies` (name, JSON): the app's token.
pub async fn provision(
    http: &str,
    admin: &str,
    policies: &[(&str, &str)],
) -> Result<String, String> {
    let app = call(http, Method::POST, "/v1/apps", admin, r#"{"name":"load"}"#).await?;
    for (name, policy) in policies {
        let path = format!("/v1/policies/{name}");
        call(http, Method::PUT, &path, admin, policy).await?;
    }
    app["token"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| format!("no token in the new app: {app}"))
}

/// limitador's limits files, served alike by sluicegate (`--limitador-config`) and by
/// limitador-server, on the namespace `bench`, each limit with a condition and a
/// variable over the descriptor's `k` and a million a second per key (within the core's
/// range for the longer windows): one limit, and the three of a file with a minute's and
/// an hour's limits too.
pub const LIMITADOR_FILES: [(&str, &str); 2] = [
    (
        "cel_1_limit",
        "- {namespace: bench, max_value: 1000000, seconds: 1, conditions: [\"descriptors[0]['k'] != ''\"], variables: [\"descriptors[0]['k']\"]}\n",
    ),
    (
        "cel_3_limits",
        "- {namespace: bench, max_value: 1000000, seconds: 1, conditions: [\"descriptors[0]['k'] != ''\"], variables: [\"descriptors[0]['k']\"]}\n\
         - {namespace: bench, max_value: 1000000000, seconds: 60, conditions: [\"descriptors[0]['k'].startsWith('k')\"], variables: [\"descriptors[0]['k']\"]}\n\
         - {namespace: bench, max_value: 1000000000, seconds: 3600, conditions: [\"size(descriptors[0]['k']) > 0\"], variables: [\"descriptors[0]['k']\"]}\n",
    ),
];

/// `sluicegate serve` on a fresh embedded store, deciding in memory or in the Redis at
/// `decisions`, with an app `load` and the [`POLICIES`], and serving the limitador
/// file `limits` if given.
pub async fn sluicegate(
    bin: &Path,
    decisions: Option<&str>,
    limits: Option<&str>,
) -> Result<Running, String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let init = Command::new(bin)
        .args(["serve", "--init-admin", "--data-dir"])
        .arg(dir.path())
        .output()
        .map_err(|e| e.to_string())?;
    let admin = String::from_utf8_lossy(&init.stdout).trim().to_owned();
    if !init.status.success() || admin.is_empty() {
        return Err(format!(
            "sluicegate serve --init-admin: {}",
            String::from_utf8_lossy(&init.stderr)
        ));
    }
    let mut command = Command::new(bin);
    command
        .env("RUST_LOG", "warn")
        .args(["serve", "--data-dir"])
        .arg(dir.path());
    if let Some(url) = decisions {
        command.args(["--decisions", url]);
    }
    if let Some(text) = limits {
        let file = dir.path().join("limits.yaml");
        std::fs::write(&file, text).map_err(|e| e.to_string())?;
        command.arg("--limitador-config").arg(file);
    }
    let mut running = Running::start(command, dir, |command, http, grpc| {
        command.args(["--listen", http, "--grpc-listen", grpc]);
    })?;
    running.token = provision(&running.http, &admin, &POLICIES).await?;
    Ok(running)
}

/// limitador's limits file for the fixed window of [`POLICIES`]: keyed by the first
/// descriptor's entry `k`, no condition.
pub const LIMITADOR_FIXED: &str = "- namespace: bench\n  max_value: 1000000\n  seconds: 1\n  conditions: []\n  variables:\n    - \"descriptors[0]['k']\"\n";

/// `limitador-server` (at `bin`) on loopback serving the limits file `limits` (its text:
/// [`LIMITADOR_FIXED`] or one of [`LIMITADOR_FILES`]); `storage` is its storage
/// subcommand (`memory`, `redis`, `redis_cached`) and `url` its Redis.
pub fn limitador(
    bin: &Path,
    limits: &str,
    storage: &str,
    url: Option<&str>,
) -> Result<Running, String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let file = dir.path().join("limits.yaml");
    std::fs::write(&file, limits).map_err(|e| e.to_string())?;
    let mut command = Command::new(bin);
    command.env("RUST_LOG", "warn");
    Running::start(command, dir, |command, http, grpc| {
        let (http_ip, http_port) = http.split_once(':').unwrap_or_default();
        let (rls_ip, rls_port) = grpc.split_once(':').unwrap_or_default();
        command
            .args(["-b", rls_ip, "-p", rls_port, "-B", http_ip, "-P", http_port])
            .arg(&file)
            .arg(storage)
            .args(url);
    })
}
