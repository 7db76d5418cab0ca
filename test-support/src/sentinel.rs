//! A Sentinel-managed primary on loopback: a primary, a replica and three sentinels
//! (`redis-server sentinel.conf --sentinel`, Debian's `redis-sentinel`) with short
//! timeouts, so a killed primary is replaced within seconds.

use std::process::{Child, Command, Stdio};

use crate::{free_port, wait_until, Server};

/// The master name the sentinels monitor.
pub const MASTER: &str = "main";

/// How long a primary must be silent before a sentinel thinks it down.
pub const DOWN_AFTER_MS: u64 = 1000;

/// The bound sentinel gives a failover before trying again.
pub const FAILOVER_TIMEOUT_MS: u64 = 3000;

/// A primary, its replica and three sentinels (quorum 2) watching them, all killed when
/// dropped.
pub struct Sentinels {
    pub primary: Server,
    pub replica: Server,
    pub sentinels: Vec<SentinelProcess>,
}

/// One `redis-server --sentinel` process.
pub struct SentinelProcess {
    pub port: u16,
    child: Child,
    dir: std::path::PathBuf,
}

impl Sentinels {
    /// Starts the primary, a replica of it (waiting until it has synced) and three
    /// sentinels, waiting until each sees the replica and the two other sentinels: a
    /// failover needs their agreement.
    pub fn start() -> Self {
        let primary = Server::start();
        let replica = Server::start_with(&["--replicaof", "127.0.0.1", &primary.port.to_string()]);
        wait_until("the replica did not sync", || {
            info(&replica, "replication").contains("master_link_status:up")
        });
        let sentinels: Vec<SentinelProcess> = (0..3)
            .map(|_| SentinelProcess::start(primary.port))
            .collect();
        wait_until(
            "the sentinels did not find each other and the replica",
            || {
                sentinels.iter().all(|sentinel| {
                    let mut con = match sentinel.client().get_connection() {
                        Ok(con) => con,
                        Err(_) => return false,
                    };
                    let mut count = |what: &str| {
                        redis::cmd("SENTINEL")
                            .arg(what)
                            .arg(MASTER)
                            .query::<Vec<redis::Value>>(&mut con)
                            .map_or(0, |v| v.len())
                    };
                    count("replicas") == 1 && count("sentinels") == 2
                })
            },
        );
        Self {
            primary,
            replica,
            sentinels,
        }
    }

    /// `redis+sentinel://` naming the three sentinels and [`MASTER`].
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port))
            .collect();
        format!("redis+sentinel://{}/{MASTER}", hosts.join(","))
    }

    /// The port of the server the first sentinel names as the primary now.
    pub fn primary_port(&self) -> Option<u16> {
        let mut con = self.sentinels[0].client().get_connection().ok()?;
        let (_, port): (String, u16) = redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(MASTER)
            .query(&mut con)
            .ok()?;
        Some(port)
    }
}

/// `INFO section` of `server`, or nothing if it does not answer.
pub fn info(server: &Server, section: &str) -> String {
    let Ok(mut con) = server.client().get_connection() else {
        return String::new();
    };
    redis::cmd("INFO")
        .arg(section)
        .query(&mut con)
        .unwrap_or_default()
}

impl SentinelProcess {
    /// Starts a sentinel monitoring the primary on `primary_port`, waiting until it
    /// answers.
    pub fn start(primary_port: u16) -> Self {
        let port = free_port();
        let dir =
            std::env::temp_dir().join(format!("sluicegate-sentinel-{port}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("sentinel directory");
        // Sentinel rewrites its configuration file: it must be its own, and writable.
        let config = dir.join("sentinel.conf");
        std::fs::write(
            &config,
            format!(
                "port {port}\nbind 127.0.0.1\ndir {dir}\n\
                 sentinel monitor {MASTER} 127.0.0.1 {primary_port} 2\n\
                 sentinel down-after-milliseconds {MASTER} {DOWN_AFTER_MS}\n\
                 sentinel failover-timeout {MASTER} {FAILOVER_TIMEOUT_MS}\n\
                 sentinel parallel-syncs {MASTER} 1\n",
                dir = dir.display()
            ),
        )
        .expect("sentinel configuration");
        let child = Command::new("redis-server")
            .arg(&config)
            .arg("--sentinel")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server on PATH (scripts/install.sh installs redis-sentinel)");
        let sentinel = Self { port, child, dir };
        wait_until("a sentinel did not start", || {
            sentinel
                .client()
                .get_connection()
                .and_then(|mut con| redis::cmd("PING").query::<String>(&mut con))
                .is_ok()
        });
        sentinel
    }

    pub fn client(&self) -> redis::Client {
        redis::Client::open(format!("redis://127.0.0.1:{}/", self.port)).expect("client")
    }
}

impl Drop for SentinelProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
