//! What the `sluicegate` binary's tests share: running it, reading its output, files for
//! it, and a real `redis-server` (sluicegate-redis's own test server).
// Each test binary uses part of this.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

#[allow(unused_imports)]
pub use sluicegate_test_support::{free_port, sled_open, Certs, Server};

/// The `sluicegate` binary, ready for arguments.
pub fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sluicegate"))
}

/// Runs `sluicegate` with `args`, as a user runs it.
pub fn sluicegate(args: impl IntoIterator<Item = impl AsRef<OsStr>>) -> Output {
    bin().args(args).output().unwrap()
}

/// Starts `sluicegate` with `args`, its output piped.
pub fn spawn(args: impl IntoIterator<Item = impl AsRef<OsStr>>) -> Child {
    bin()
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Runs `sluicegate` with `args`, `input` on its standard input.
pub fn sluicegate_with_stdin(
    args: impl IntoIterator<Item = impl AsRef<OsStr>>,
    input: &str,
) -> Output {
    use std::io::Write;
    let mut child = bin()
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// Asserts `output`'s exit code, showing its stderr if it differs.
#[track_caller]
pub fn assert_exit(output: &Output, code: i32) {
    assert_eq!(output.status.code(), Some(code), "{}", stderr(output));
}

/// Asserts that `text` contains `wanted`, showing `text` if not.
#[track_caller]
pub fn assert_contains(text: &str, wanted: &str) {
    assert!(text.contains(wanted), "{text}");
}

pub fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).unwrap()
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8(output.stderr.clone()).unwrap()
}

/// The repository's example policy file.
pub fn examples() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/policies.toml")
        .to_str()
        .unwrap()
        .to_owned()
}

/// A trace of `requests` requests from late 2023 on, 0 to 90 ms apart, from `keys` users,
/// costing 1 to 3.
pub fn trace(requests: u64, keys: u64) -> String {
    let mut trace = String::from("t_us,key,cost\n");
    let mut t = 1_700_000_000_000_000u64;
    for i in 0..requests {
        t += (i * 7919) % 90_000;
        trace += &format!("{t},user-{},{}\n", i % keys, 1 + i % 3);
    }
    trace
}

/// A temporary directory (deleted when dropped) holding `text` in `name`, and the
/// file's path.
pub fn temp_file(name: &str, text: &str) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), name, text);
    (dir, path)
}

/// Writes `text` to `dir/name`; returns the path.
pub fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_owned()
}

pub const BUCKET: [&str; 8] = [
    "--algorithm",
    "token-bucket",
    "--capacity",
    "10",
    "--rate",
    "5",
    "--period",
    "1s",
];

/// Runs `sluicegate` with `command`'s words, as a shell splits a line without quotes.
pub fn run_line(command: &str) -> Output {
    sluicegate(command.split_whitespace())
}

/// Runs `sluicegate` with `args` and the [`BUCKET`] policy's flags.
pub fn bucket(args: &[&str]) -> Output {
    sluicegate(with(args, &BUCKET))
}

pub fn with(prefix: &[&str], rest: &[&str]) -> Vec<String> {
    prefix.iter().chain(rest).map(|s| (*s).to_owned()).collect()
}

/// Lets `waiter` start waiting, runs `release`, and checks that the waiter then acquires
/// within `bound`.
pub fn woken_by(waiter: Child, release: impl FnOnce() -> Output, bound: Duration) {
    std::thread::sleep(Duration::from_millis(300));
    assert_exit(&release(), 0);
    let released = Instant::now();
    assert_exit(&waiter.wait_with_output().unwrap(), 0);
    let waited = released.elapsed();
    assert!(waited < bound, "woken {waited:?} after the release");
}

pub fn lock(args: &[&str]) -> Output {
    sluicegate([&["lock"], args].concat())
}

/// Writes `value` under `key` in the sled database at `path`, in the CLI's tree, as
/// another program might; the database is closed again before returning.
pub fn sled_put(path: &Path, key: &[u8], value: &[u8]) {
    let db = sled_open(path);
    db.open_tree("sluicegate")
        .unwrap()
        .insert(key, value)
        .unwrap();
    db.flush().unwrap();
}

pub fn sled_get(path: &Path, key: &[u8]) -> Option<Vec<u8>> {
    let db = sled_open(path);
    let value = db.open_tree("sluicegate").unwrap().get(key).unwrap();
    value.map(|v| v.to_vec())
}

/// Not a state: version 1, a token bucket's tag, then bytes that do not fit it.
pub const GARBAGE: &[u8] = b"\x01\x04not a bucket";

/// Runs `test` on a new sled database, then on a new Redis server: one test body, so
/// both backends must give the same output and exit codes.
pub fn on_sled_and_redis(test: impl Fn(&str, &Raw)) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    test(&format!("sled:{}", path.display()), &Raw::Sled(&path));
    let redis = Server::start();
    test(&redis.url(), &Raw::Redis(&redis));
}

/// Where a test puts bytes another program wrote, and reads them back.
pub enum Raw<'a> {
    Sled(&'a Path),
    Redis(&'a Server),
}

impl Raw<'_> {
    pub fn put(&self, key: &[u8], value: &[u8]) {
        match self {
            Self::Sled(path) => sled_put(path, key, value),
            Self::Redis(server) => redis::cmd("SET")
                .arg(key)
                .arg(value)
                .exec(&mut server.connection())
                .unwrap(),
        }
    }

    pub fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        match self {
            Self::Sled(path) => sled_get(path, key),
            Self::Redis(server) => redis::cmd("GET")
                .arg(key)
                .query(&mut server.connection())
                .unwrap(),
        }
    }

    /// Whether nothing at all is stored (sled: not even a database).
    pub fn is_empty(&self) -> bool {
        match self {
            Self::Sled(path) => !path.exists(),
            Self::Redis(server) => {
                redis::cmd("DBSIZE")
                    .query::<u64>(&mut server.connection())
                    .unwrap()
                    == 0
            }
        }
    }
}
