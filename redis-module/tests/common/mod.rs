//! A real `redis-server` with the module loaded, on a free loopback port, killed when
//! dropped (the pattern of `storage-redis/tests/common`, with `--loadmodule`).
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::thread::sleep;
use std::time::{Duration, Instant};

/// The module: `TOLLGATE_REDIS_MODULE` if set (scripts/test.sh builds it and sets it),
/// else built here with cargo's test profile (cargo does not rebuild a cdylib for its
/// integration tests), once per test binary, into `target/debug/`.
pub fn module_path() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            if let Some(path) = std::env::var_os("TOLLGATE_REDIS_MODULE") {
                return PathBuf::from(path);
            }
            let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
            let status = Command::new(cargo)
                .args([
                    "build",
                    "--quiet",
                    "--profile",
                    "test",
                    "-p",
                    "tollgate-redis-module",
                ])
                .current_dir(env!("CARGO_MANIFEST_DIR"))
                .status()
                .expect("cargo");
            assert!(status.success(), "building the module failed");
            let exe = std::env::current_exe().expect("test binary path");
            // target/debug/deps/<test> -> target/debug/
            let dir = exe
                .parent()
                .and_then(|d| d.parent())
                .expect("target directory");
            dir.join("libtollgate_redis_module.so")
        })
        .clone()
}

/// Polls `ready` every 50 ms for up to 20 s; panics saying `what` did not happen if it
/// never holds.
pub fn wait_until(what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !ready() {
        assert!(Instant::now() < deadline, "{what}");
        sleep(Duration::from_millis(50));
    }
}

/// A `redis-server` process the test owns.
pub struct Server {
    pub port: u16,
    child: Child,
    dir: PathBuf,
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    listener.local_addr().expect("local address").port()
}

impl Server {
    /// Starts a server without persistence, the module loaded.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Starts a server with extra `redis-server` arguments.
    pub fn start_with(extra: &[&str]) -> Self {
        Self::start_loading(&module_path(), extra)
    }

    /// Starts a server loading `module` instead (a peer's, for the benches).
    #[allow(dead_code)]
    pub fn start_loading(module: &std::path::Path, extra: &[&str]) -> Self {
        let port = free_port();
        let dir =
            std::env::temp_dir().join(format!("tollgate-module-{port}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("server directory");
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&dir)
            .arg("--loadmodule")
            .arg(module)
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server on PATH (scripts/test.sh installs it)");
        let server = Self { port, child, dir };
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(mut con) = server.client().get_connection() {
                if redis::cmd("PING").query::<String>(&mut con).is_ok() {
                    return server;
                }
            }
            sleep(Duration::from_millis(20));
        }
        panic!("redis-server with the module did not start on port {port}");
    }

    /// The server's working directory (its AOF lives here).
    pub fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    pub fn client(&self) -> redis::Client {
        redis::Client::open(format!("redis://127.0.0.1:{}/", self.port)).expect("client")
    }

    pub fn connection(&self) -> redis::Connection {
        self.client().get_connection().expect("connection")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
