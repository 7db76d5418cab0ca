//! A one-member etcd on loopback (Debian's `etcd-server`): free client and peer ports, a
//! data directory of its own, short Raft timers so a lease's minimum ttl is one second;
//! killed when dropped.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::{free_port, wait_until};

/// An `etcd` process the test owns; [`Etcd::restart`] keeps its data.
pub struct Etcd {
    pub port: u16,
    peer_port: u16,
    dir: std::path::PathBuf,
    child: Option<Child>,
}

impl Etcd {
    /// Starts a new member, waiting (bounded) until it reports itself healthy.
    pub fn start() -> Self {
        let port = free_port();
        let dir =
            std::env::temp_dir().join(format!("sluicegate-etcd-{port}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut etcd = Self {
            port,
            peer_port: free_port(),
            dir,
            child: None,
        };
        etcd.restart();
        etcd
    }

    /// The CLI's form: `etcd://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("etcd://127.0.0.1:{}", self.port)
    }

    /// The client library's form: `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The process id, to pause or kill it.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// Kills the member (SIGKILL) and waits for it to exit.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the member again on the same ports and data directory: what it had
    /// committed (keys, leases, the revision) is read back from disk.
    pub fn restart(&mut self) {
        self.kill();
        let client = format!("http://127.0.0.1:{}", self.port);
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let child = Command::new("etcd")
            .args(["--name", "t", "--data-dir"])
            .arg(&self.dir)
            .args([
                "--listen-client-urls",
                &client,
                "--advertise-client-urls",
                &client,
            ])
            .args([
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &peer,
            ])
            .args(["--initial-cluster", &format!("t={peer}")])
            // 10 ms heartbeats, 100 ms elections: the minimum lease is 150 ms, so 1 s.
            .args(["--heartbeat-interval", "10", "--election-timeout", "100"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("etcd on PATH (scripts/install.sh installs etcd-server)");
        self.child = Some(child);
        wait_until("etcd did not become healthy", || self.healthy());
    }

    /// Whether `GET /health` answers that the member has a leader and serves.
    fn healthy(&self) -> bool {
        let Ok(mut stream) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
        let mut answer = String::new();
        stream
            .write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
            .and_then(|()| stream.read_to_string(&mut answer))
            .is_ok()
            && answer.contains("\"health\":\"true\"")
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
