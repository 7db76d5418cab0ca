//! A real `redis-server` on a free loopback port, killed when dropped.
#![allow(dead_code)]

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

/// A `redis-server` process the test owns.
pub struct Server {
    pub port: u16,
    child: Option<Child>,
    extra: Vec<String>,
    dir: std::path::PathBuf,
}

/// A port nothing listens on right now.
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    listener.local_addr().expect("local address").port()
}

impl Server {
    /// Starts a server without persistence.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Starts a server with extra `redis-server` arguments.
    pub fn start_with(extra: &[&str]) -> Self {
        let port = free_port();
        let dir =
            std::env::temp_dir().join(format!("tollgate-redis-{port}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("server directory");
        let mut server = Self {
            port,
            child: None,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            dir,
        };
        server.restart();
        server
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn client(&self) -> redis::Client {
        redis::Client::open(self.url()).expect("client")
    }

    pub fn connection(&self) -> redis::Connection {
        self.client().get_connection().expect("connection")
    }

    /// Kills the server (SIGKILL) and waits for it to exit.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops the server process (SIGSTOP): connections are accepted, nothing answers.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// Continues a paused server.
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        let pid = self.child.as_ref().expect("running").id().to_string();
        let status = Command::new("kill")
            .args([signal, &pid])
            .status()
            .expect("kill");
        assert!(status.success());
    }

    /// Starts the server again on the same port, waiting until it answers `PING`.
    pub fn restart(&mut self) {
        self.kill();
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server on PATH (scripts/test.sh installs it)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(mut con) = self.client().get_connection() {
                if redis::cmd("PING").query::<String>(&mut con).is_ok() {
                    return;
                }
            }
            sleep(Duration::from_millis(20));
        }
        panic!("redis-server did not start on port {}", self.port);
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Three cluster-enabled servers joined into one cluster covering every slot.
pub struct Cluster {
    pub nodes: Vec<Server>,
}

impl Cluster {
    pub fn start() -> Self {
        let nodes: Vec<Server> = (0..3)
            .map(|_| {
                Server::start_with(&["--cluster-enabled", "yes", "--cluster-node-timeout", "2000"])
            })
            .collect();
        let addresses: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let status = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addresses)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("redis-cli on PATH");
        assert!(status.success(), "redis-cli --cluster create failed");
        let cluster = Self { nodes };
        // Wait until every node agrees the cluster is up.
        let deadline = Instant::now() + Duration::from_secs(20);
        for node in &cluster.nodes {
            loop {
                let info: String = redis::cmd("CLUSTER")
                    .arg("INFO")
                    .query(&mut node.connection())
                    .unwrap_or_default();
                if info.contains("cluster_state:ok") {
                    break;
                }
                assert!(Instant::now() < deadline, "cluster did not come up");
                sleep(Duration::from_millis(50));
            }
        }
        cluster
    }

    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(Server::url).collect()
    }
}
