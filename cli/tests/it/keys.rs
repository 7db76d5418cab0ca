//! `check`, `peek`, `reset`, `inspect` and `purge` on stored states: namespaces,
//! sled databases created only by a write, and states sluicegate cannot read left alone.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::{
    self, assert_contains, assert_exit, bin, bucket, examples, on_sled_and_redis, run_line,
    sled_get, sled_put, sluicegate, stderr, stdout, with, BUCKET, GARBAGE,
};

#[test]
fn check_peek_reset_inspect_on_sled_and_redis() {
    on_sled_and_redis(|backend, _| check_peek_reset_inspect(backend));
}

fn check_peek_reset_inspect(backend: &str) {
    let run = |command: &str| {
        run_line(&format!(
            "{command} alice --algorithm fixed-window --limit 2 --period 1h --backend \
             {backend} --now 7200000000"
        ))
    };
    if let Some(path) = backend.strip_prefix("sled:") {
        // Reading never creates a database.
        let out = run("inspect");
        assert_exit(&out, 2);
        assert_contains(&stderr(&out), "no database at");
        assert!(!Path::new(path).exists());
    } else {
        assert_exit(&run("inspect"), 0);
        assert!(stdout(&run("inspect")).contains("state      fresh (nothing stored)"));
    }
    assert_exit(&run("check"), 0);
    assert_exit(&run("check"), 0);
    let denied = run("check");
    assert_exit(&denied, 1);
    assert!(stdout(&denied).contains(r#""allowed":false"#));
    assert!(stdout(&denied).contains(r#""retry_after_us":3600000000"#));
    let inspected = stdout(&run("inspect"));
    assert!(inspected.contains("window count  2 of 2\n"), "{inspected}");
    assert!(
        inspected.contains("fresh again   in 1 h (at 10800000000 µs)\n"),
        "{inspected}"
    );
    assert!(inspected.contains("encoded       0101"), "{inspected}");
    assert_exit(&run("peek"), 1);
    let reset = run("reset");
    assert_exit(&reset, 0);
    assert_eq!(
        stdout(&reset),
        "alice: reset (its next request starts fresh)\n"
    );
    assert_exit(&run("peek"), 0);
    assert!(stdout(&run("inspect")).contains("state      fresh (nothing stored)"));
}

#[test]
fn policies_on_one_store_never_share_keys() {
    let dir = tempfile::tempdir().unwrap();
    let redis = common::Server::start();
    let sled = format!("sled:{}", dir.path().join("db").display());
    for backend in [sled, redis.url()] {
        let check = |policy: &str, extra: &[&str]| {
            let mut args = vec![
                "check",
                "alice",
                "--config",
                &*examples(),
                "--policy",
                policy,
                "--app",
                "web",
                "--now",
                "1000000",
                "--backend",
                &backend,
            ]
            .into_iter()
            .map(str::to_owned)
            .collect::<Vec<_>>();
            args.extend(extra.iter().map(|s| (*s).to_owned()));
            sluicegate(&args)
        };
        for policy in ["login", "api", "login", "reports", "daily", "api"] {
            let out = check(policy, &[]);
            assert_eq!(
                out.status.code(),
                Some(0),
                "{policy} on {backend}: {}",
                stderr(&out)
            );
        }
        // api twice: 8 tokens left; login twice: 3 of 5.
        assert!(stdout(&check("api", &[])).contains(r#""remaining":7"#));
        assert!(stdout(&check("login", &[])).contains(r#""remaining":2"#));
        // Another prefix is another namespace.
        assert!(stdout(&check("api", &["--prefix", "other:"])).contains(r#""remaining":9"#));
        // Flags name their own namespace, by algorithm and parameters.
        let inspect = |args: &[&str]| {
            let mut all = vec![
                "inspect",
                "alice",
                "--backend",
                &*backend,
                "--now",
                "1000000",
            ];
            all.extend(args);
            stdout(&sluicegate(&all))
        };
        assert!(inspect(&BUCKET).contains("stored as  sluicegate:token-bucket-10-5-1s:alice\n"));
    }
    // In Redis the keys are there under their names, as text.
    let client = redis::Client::open(redis.url()).unwrap();
    let mut con = client.get_connection().unwrap();
    let mut keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut con).unwrap();
    keys.sort();
    assert_eq!(
        keys,
        [
            "other:api:alice",
            "sluicegate:api:alice",
            "sluicegate:daily:alice",
            "sluicegate:login:alice",
            "sluicegate:reports:alice"
        ]
    );
}

#[test]
fn a_sled_database_is_created_only_by_a_write_in_an_existing_directory() {
    let dir = tempfile::tempdir().unwrap();
    let run = |command: &str, path: &Path| {
        let backend = format!("sled:{}", path.display());
        bucket(&[command, "a", "--backend", &backend, "--now", "0"])
    };
    let missing = dir.path().join("no/such/dir/db");
    for command in ["check", "peek", "inspect", "reset"] {
        let out = run(command, &missing);
        assert_eq!(out.status.code(), Some(2), "{command}");
        assert_contains(&stderr(&out), "no database at");
    }
    assert!(!dir.path().join("no").exists());
    let new = dir.path().join("db");
    for command in ["peek", "inspect"] {
        let out = run(command, &new);
        assert_exit(&out, 2);
        assert!(stderr(&out).contains("commands that only read or delete never create one"));
        assert!(!new.exists());
    }
    assert_exit(&run("check", &new), 0);
    assert!(new.exists());
    assert_exit(&run("peek", &new), 0);
}

/// Whether a process holds a `flock` on `file` (sled's lock on its data file), as the
/// kernel lists them in /proc/locks by device and inode; reading it takes no lock.
fn flocked(file: &std::path::Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::metadata(file) else {
        return false;
    };
    let inode = format!(":{}", meta.ino());
    std::fs::read_to_string("/proc/locks").is_ok_and(|locks| {
        locks.lines().any(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            fields.get(1) == Some(&"FLOCK") && fields.get(5).is_some_and(|f| f.ends_with(&inode))
        })
    })
}

#[test]
fn a_sled_database_in_use_by_another_process_is_said_plainly() {
    let dir = tempfile::tempdir().unwrap();
    let backend = format!("sled:{}", dir.path().join("db").display());
    // A replay reading standard input holds the database until its input ends.
    let mut holder = bin()
        .args(with(
            &["replay", "--trace", "-", "--backend", &backend],
            &BUCKET,
        ))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Until it holds the database's lock: polled for 10 s, as a loaded machine may start
    // the holder late (a fixed pause could end before it locks).
    let start = Instant::now();
    while !flocked(&dir.path().join("db").join("db")) {
        assert!(start.elapsed() < Duration::from_secs(10), "never held");
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = bucket(&["check", "a", "--backend", &backend, "--now", "0"]);
    assert_exit(&out, 4);
    assert_eq!(
        stderr(&out),
        format!(
            "sluicegate: the sled database at {} is in use by another process; sled allows one process at a time\n",
            &backend["sled:".len()..]
        )
    );
    {
        use std::io::Write;
        let mut input = holder.stdin.take().unwrap();
        input.write_all(b"t_us,key,cost\n0,a,1\n").unwrap();
    }
    let held = holder.wait_with_output().unwrap();
    assert_exit(&held, 0);
    assert!(String::from_utf8_lossy(&held.stdout).contains(r#""remaining":9"#));
}

#[test]
fn inspect_prints_json_in_the_policy_units() {
    let dir = tempfile::tempdir().unwrap();
    let backend = format!("sled:{}", dir.path().join("db").display());
    let run = |command: &str, extra: &[&str]| {
        let mut args = with(
            &[command, "alice", "--backend", &backend, "--now", "1000000"],
            &BUCKET,
        );
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        sluicegate(&args)
    };
    assert_exit(&run("check", &["--cost", "3"]), 0);
    let json: serde_json::Value =
        serde_json::from_slice(&run("inspect", &["--json"]).stdout).unwrap();
    assert_eq!(
        json,
        serde_json::json!({
            "key": "alice",
            "stored_key": "sluicegate:token-bucket-10-5-1s:alice",
            "algorithm": "token-bucket",
            "stored": true,
            "now_us": 1_000_000,
            "limit": 10,
            "used": 7,
            "measure": "tokens available",
            "entries": null,
            "remaining": 7,
            "fresh_after_us": 600_000,
            "encoded": "01040000000000186a000000000000000000",
        })
    );
    let text = stdout(&run("inspect", &[]));
    assert!(text.contains("tokens available  7 of 10\n"), "{text}");
    assert!(
        text.contains("fresh again       in 600 ms (at 1600000 µs)\n"),
        "{text}"
    );
    assert!(!text.contains("BucketState"), "{text}");
}

#[test]
fn memory_state_does_not_outlive_the_command_and_commands_say_so() {
    for command in ["inspect", "reset"] {
        let out = bucket(&[command, "a"]);
        assert_eq!(out.status.code(), Some(2), "{command}");
        assert!(
            stderr(&out).contains("the memory backend keeps states only while one command runs"),
            "{command}: {}",
            stderr(&out)
        );
    }
}

#[test]
fn a_state_of_another_algorithm_is_named_with_its_key_as_text() {
    let dir = tempfile::tempdir().unwrap();
    let backend = format!("sled:{}", dir.path().join("db").display());
    // Crafted prefixes put a sliding-log state where the bucket looks.
    let out = sluicegate([
        "check",
        "token-bucket-10-5-1s:alice",
        "--config",
        &examples(),
        "--policy",
        "login",
        "--prefix",
        "",
        "--backend",
        &backend,
        "--now",
        "0",
    ]);
    assert_exit(&out, 0);
    let out = bucket(&[
        "check",
        "alice",
        "--prefix",
        "login:",
        "--backend",
        &backend,
        "--now",
        "0",
    ]);
    assert_exit(&out, 4);
    assert_eq!(
        stderr(&out),
        "sluicegate: key \"alice\" holds a state sluicegate cannot read: state is a sliding log's, expected a token bucket's\n"
    );
}

/// `redis-cli` against the test's server: how an operator or another app writes a key.
fn redis_cli(server: &common::Server, args: &[&[u8]]) -> String {
    use std::os::unix::ffi::OsStrExt;
    let out = Command::new("redis-cli")
        .args(["-p", &server.port.to_string()])
        .args(args.iter().map(|a| std::ffi::OsStr::from_bytes(a)))
        .output()
        .unwrap();
    assert_exit(&out, 0);
    stdout(&out)
}

/// The Redis list under `key`, one element a line.
fn redis_list(server: &common::Server, key: &[u8]) -> String {
    redis_cli(server, &[b"LRANGE", key, b"0", b"-1"])
}

/// A temporary directory, the path of a sled database in it (created by the first
/// write) and its `--backend`, and a Redis server: both stores empty.
fn stores() -> (tempfile::TempDir, PathBuf, String, common::Server) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let sled = format!("sled:{}", path.display());
    (dir, path, sled, common::Server::start())
}

const ALICE: &str = "sluicegate:token-bucket-10-5-1s:alice";

/// An application's value, which sluicegate must leave alone.
const USER: &[u8] = b"user=alice";

/// Issue 16 item 4: the same garbage bytes give the same message and exit code from
/// `check`, `peek`, `inspect` and `reset`, on sled and on Redis (the libraries' words,
/// the core decoder's reason, the key as text); a Redis list is named as such by every
/// command; nothing is changed or deleted.
#[test]
fn a_key_sluicegate_cannot_read_gives_one_message_from_every_command() {
    let (_dir, path, sled, redis) = stores();
    // A database with one state in it, then the garbage under alice's key.
    assert_exit(
        &bucket(&["check", "bob", "--backend", &sled, "--now", "0"]),
        0,
    );
    sled_put(&path, ALICE.as_bytes(), GARBAGE);
    redis_cli(&redis, &[b"SET", ALICE.as_bytes(), GARBAGE]);
    let mut messages = Vec::new();
    for backend in [sled.as_str(), &redis.url()] {
        for command in ["check", "peek", "inspect", "reset"] {
            let out = bucket(&[command, "alice", "--backend", backend, "--now", "0"]);
            assert_eq!(
                out.status.code(),
                Some(4),
                "{command} on {backend}: {}",
                stderr(&out)
            );
            assert_eq!(stdout(&out), "", "{command} on {backend}");
            messages.push(stderr(&out));
        }
    }
    assert_eq!(
        messages[0],
        "sluicegate: key \"alice\" holds a state sluicegate cannot read: state field tat is invalid for these parameters\n"
    );
    assert!(messages.iter().all(|m| *m == messages[0]), "{messages:#?}");
    assert_eq!(sled_get(&path, ALICE.as_bytes()).as_deref(), Some(GARBAGE));
    assert_eq!(
        redis_cli(&redis, &[b"STRLEN", ALICE.as_bytes()]).trim(),
        GARBAGE.len().to_string()
    );
    // A Redis list under the key: a typed message naming the key from every command.
    redis_cli(&redis, &[b"DEL", ALICE.as_bytes()]);
    redis_cli(&redis, &[b"LPUSH", ALICE.as_bytes(), b"x"]);
    for command in ["check", "peek", "inspect", "reset"] {
        let out = bucket(&[command, "alice", "--backend", &redis.url(), "--now", "0"]);
        assert_eq!(out.status.code(), Some(4), "{command}");
        assert_eq!(
            stderr(&out),
            "sluicegate: key \"alice\" holds a Redis list, not a sluicegate state\n",
            "{command}"
        );
    }
    assert_eq!(redis_list(&redis, ALICE.as_bytes()), "x\n");
}

/// Issue 17 item 2: `reset` deletes only sluicegate states inside the policy's namespace:
/// an application's string or list under the namespaced key is refused and kept, and a
/// key outside the namespace (`session:42`) is never touched.
#[test]
fn reset_touches_only_sluicegate_states_inside_the_namespace() {
    let (_dir, path, sled, redis) = stores();
    let reset = |key: &str, backend: &str| bucket(&["reset", key, "--backend", backend]);
    let outside = b"session:42".as_slice();
    let session = "sluicegate:token-bucket-10-5-1s:session:42";
    assert_exit(
        &bucket(&["check", "bob", "--backend", &sled, "--now", "0"]),
        0,
    );
    sled_put(&path, outside, USER);
    sled_put(&path, ALICE.as_bytes(), USER);
    redis_cli(&redis, &[b"SET", outside, USER]);
    redis_cli(&redis, &[b"SET", ALICE.as_bytes(), USER]);
    redis_cli(&redis, &[b"LPUSH", session.as_bytes(), b"x"]);
    for backend in [sled.as_str(), &redis.url()] {
        let out = reset("alice", backend);
        assert_eq!(out.status.code(), Some(4), "{backend}");
        assert_eq!(
            stderr(&out),
            "sluicegate: key \"alice\" holds a state sluicegate cannot read: state encoding version 117 is not supported (this build reads version 1)\n"
        );
        // `reset session:42` is about sluicegate's own key for it, absent here.
        let out = reset("session:42", backend);
        if backend == sled {
            assert_exit(&out, 0);
        } else {
            assert_exit(&out, 4);
            assert_eq!(
                stderr(&out),
                "sluicegate: key \"session:42\" holds a Redis list, not a sluicegate state\n"
            );
        }
    }
    assert_eq!(sled_get(&path, outside).as_deref(), Some(USER));
    assert_eq!(sled_get(&path, ALICE.as_bytes()).as_deref(), Some(USER));
    assert_eq!(redis_cli(&redis, &[b"GET", outside]), "user=alice\n");
    assert_eq!(
        redis_cli(&redis, &[b"GET", ALICE.as_bytes()]),
        "user=alice\n"
    );
    assert_eq!(redis_list(&redis, session.as_bytes()), "x\n");
}

/// Issue 16 item 1's clean-up: `purge` deletes every state of the policy in its
/// namespace, on Redis (where states written at explicit times never expire) and on
/// sled, and keeps anything else; memory explains that it forgets at exit.
#[test]
fn purge_deletes_the_policys_states_and_nothing_else() {
    let (dir, path, sled, redis) = stores();
    // Another policy, with its own namespace.
    let window = "--algorithm fixed-window --limit 5 --period 1s";
    let window: Vec<&str> = window.split_whitespace().collect();
    for backend in [sled.as_str(), &redis.url()] {
        for key in ["a", "b", "c"] {
            let out = bucket(&["check", key, "--backend", backend, "--now", "1000000"]);
            assert_exit(&out, 0);
        }
        // Another policy's state, in its own namespace.
        let out = sluicegate(with(
            &["check", "a", "--backend", backend, "--now", "1000000"],
            &window,
        ));
        assert_exit(&out, 0);
    }
    sled_put(&path, ALICE.as_bytes(), USER);
    sled_put(&path, b"session:42", USER);
    redis_cli(&redis, &[b"SET", ALICE.as_bytes(), USER]);
    redis_cli(&redis, &[b"SET", b"session:42", USER]);
    redis_cli(
        &redis,
        &[b"LPUSH", b"sluicegate:token-bucket-10-5-1s:list", b"x"],
    );
    for backend in [sled.as_str(), &redis.url()] {
        let out = bucket(&["purge", "--backend", backend]);
        assert_exit(&out, 0);
        assert_eq!(
            stdout(&out),
            "token-bucket-10-5-1s: purged 3 states (keys sluicegate:token-bucket-10-5-1s:*)\n"
        );
        let again = bucket(&["purge", "--backend", backend]);
        assert_contains(&stdout(&again), "purged 0 states");
        // Purged keys are fresh; the other policy's state is still there.
        let out = bucket(&["inspect", "b", "--backend", backend, "--now", "1000000"]);
        assert_contains(&stdout(&out), "fresh (nothing stored)");
        let out = sluicegate(with(
            &["inspect", "a", "--backend", backend, "--now", "1000000"],
            &window,
        ));
        assert_contains(&stdout(&out), "window count  1 of 5");
    }
    assert_eq!(sled_get(&path, ALICE.as_bytes()).as_deref(), Some(USER));
    assert_eq!(sled_get(&path, b"session:42").as_deref(), Some(USER));
    let mut con = redis.connection();
    let mut keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut con).unwrap();
    keys.sort();
    assert_eq!(
        keys,
        [
            "session:42",
            "sluicegate:fixed-window-5-1s:a",
            "sluicegate:token-bucket-10-5-1s:alice",
            "sluicegate:token-bucket-10-5-1s:list"
        ]
    );
    let out = bucket(&["purge"]);
    assert_exit(&out, 2);
    assert!(stderr(&out).contains("nothing stored to inspect, reset or purge"));
    // Purging never creates a database.
    let missing = format!("sled:{}", dir.path().join("none").display());
    assert_exit(&bucket(&["purge", "--backend", &missing]), 2);
    assert!(!dir.path().join("none").exists());
}

/// `check` without `--now` decides on the server's time, as the service does, so its
/// key expires when its state turns fresh; with `--now` it is the caller's time, and
/// the key is kept.
#[test]
fn check_on_redis_without_now_writes_a_key_that_expires() {
    let redis = common::Server::start();
    let url = redis.url();
    let window = [
        "--algorithm",
        "fixed-window",
        "--limit",
        "5",
        "--period",
        "1m",
    ];
    assert_exit(
        &sluicegate(with(&["check", "idle", "--backend", &url], &window)),
        0,
    );
    let mut con = redis.connection();
    let key = "sluicegate:fixed-window-5-1m:idle";
    let pttl: i64 = redis::cmd("PTTL").arg(key).query(&mut con).unwrap();
    assert!(pttl > 0 && pttl <= 60_000, "PTTL {pttl}");
    // One used: a peek at a cost of 1 would leave 3.
    let peek = sluicegate(with(&["peek", "idle", "--backend", &url], &window));
    assert_contains(&stdout(&peek), "\"remaining\":3");
}
