//! The policy file's ban and composite (the service's policy model, one parser),
//! `sluicegate policy validate`, and `sluicegate serve --init-admin`, run as a user runs
//! them.

use std::process::{Command, Output};

use crate::common::{
    assert_contains, assert_exit, bin, examples, sluicegate, stderr, stdout, temp_file, write,
};

const POLICIES: &str = r#"
[policies.both]
algorithm = "composite"
limits = [
  { algorithm = "fixed-window", limit = 3, period = "1h" },
  { algorithm = "token-bucket", capacity = 2, rate = 1, period = "1h" },
]

[policies.login]
algorithm = "fixed-window"
limit = 1
period = "1h"
ban = { threshold = 1, window = "1h", duration = "2h" }
"#;

/// `allowed` of each line of a replay's output.
fn allowed(out: &Output) -> Vec<bool> {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone())
        .unwrap()
        .lines()
        .map(|l| l.contains("\"allowed\":true"))
        .collect()
}

#[test]
fn composite_and_ban_run_on_every_backend_kind() {
    let (dir, file) = temp_file("p.toml", POLICIES);
    let trace = write(
        dir.path(),
        "t.csv",
        "t_us,key,cost\n0,k,1\n0,k,1\n0,k,1\n0,k,1\n",
    );
    // The bucket (2) is the tighter limit of the two.
    let db = dir.path().join("db");
    std::fs::create_dir(&db).unwrap();
    let sled = format!("sled:{}", db.display());
    for backend in ["memory", sled.as_str()] {
        let out = sluicegate([
            "replay",
            "--trace",
            &trace,
            "--config",
            &file,
            "--policy",
            "both",
            "--backend",
            backend,
        ]);
        assert_eq!(allowed(&out), [true, true, false, false], "{backend}");
    }
    // Two denials in the window exceed the threshold of 1: banned for 2 h, so the next
    // window's first request is denied too; after the ban it passes.
    let trace = write(
        dir.path(),
        "ban.csv",
        "t_us,key,cost\n0,k,1\n1,k,1\n2,k,1\n3600000000,k,1\n7200000002,k,1\n",
    );
    let out = sluicegate([
        "replay", "--trace", &trace, "--config", &file, "--policy", "login",
    ]);
    assert_eq!(allowed(&out), [true, false, false, false, true]);
}

#[test]
fn errors_point_into_composites_and_bans() {
    let (_dir, file) = temp_file("bad.toml", "[policies.c]\nalgorithm = \"composite\"\nlimits = [{ algorithm = \"fixed-window\", limit = 1, period = \"1s\" }, { algorithm = \"token-bucket\", capacity = 1, rate = 0, period = \"1s\" }]\n\n[policies.b]\nalgorithm = \"fixed-window\"\nlimit = 1\nperiod = \"1s\"\nban = { threshold = 1, window = \"400d\", duration = \"1m\" }\n");
    let out = sluicegate(["check", "k", "--config", &file, "--policy", "c"]);
    assert_exit(&out, 2);
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.ends_with("bad.toml:3:10: policy \"c\": `limits[1]`: `rate` must be between 1 and 1000000000, got 0\n"),
        "{err}"
    );
    let out = sluicegate(["check", "k", "--config", &file, "--policy", "b"]);
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.ends_with("bad.toml:9:7: policy \"b\": `ban`: `window` must be between 1 µs and 366 days, got 400 days\n"),
        "{err}"
    );
}

/// `policy validate` checks a file or a directory's `*.toml` files with the parser of
/// `--config`, without a server: 0 when all are valid, 2 with each file's problem.
#[test]
fn policy_validate_checks_files_and_directories_as_config_reads_them() {
    let out = sluicegate(["policy", "validate", &examples()]);
    assert_exit(&out, 0);
    assert_contains(&stdout(&out), "policies.toml: ");
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "good.toml", POLICIES);
    write(dir.path(), "notes.txt", "not a policy file");
    let folder = dir.path().to_str().unwrap();
    let out = sluicegate(["policy", "validate", folder]);
    assert_exit(&out, 0);
    assert_contains(&stdout(&out), "good.toml: 2 policies valid (both, login)");
    write(
        dir.path(),
        "bad.toml",
        "[policies.late]\nalgorithm = \"fixed-window\"\nlimit = 0\nperiod = \"1s\"\n",
    );
    write(
        dir.path(),
        "broken.toml",
        "[policies.x]\nalgorithm = \"nope\"\n",
    );
    let out = sluicegate(["policy", "validate", folder]);
    assert_exit(&out, 2);
    let err = stderr(&out);
    assert!(
        err.contains("bad.toml:3:9: policy \"late\": `limit`"),
        "{err}"
    );
    assert!(err.contains("broken.toml:2:13: "), "{err}");
    // The same message as `--config` gives.
    let check = sluicegate([
        "check",
        "k",
        "--config",
        &format!("{folder}/bad.toml"),
        "--policy",
        "late",
    ]);
    assert!(
        err.contains(stderr(&check).trim_start_matches("sluicegate: ").trim_end()),
        "{err}"
    );
    assert_exit(
        &sluicegate(["policy", "validate", &format!("{folder}/missing.toml")]),
        2,
    );
    let empty = tempfile::tempdir().unwrap();
    assert_exit(
        &sluicegate(["policy", "validate", empty.path().to_str().unwrap()]),
        2,
    );
}

#[test]
fn init_admin_prints_a_token_once() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let data = data.to_str().unwrap();
    let first = sluicegate(["serve", "--data-dir", data, "--init-admin"]);
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let token = String::from_utf8(first.stdout).unwrap();
    assert!(
        token.starts_with("sgu_") && token.trim().len() == 47,
        "{token}"
    );
    let again = sluicegate(["serve", "--data-dir", data, "--init-admin"]);
    assert_exit(&again, 4);
    assert!(String::from_utf8_lossy(&again.stderr).contains("an admin exists already"));
}

/// Every flag of `serve` is also an environment variable, listed in its help; a flag
/// given on the command line wins.
#[test]
fn serve_reads_its_flags_from_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let (from_env, from_flag) = (dir.path().join("env"), dir.path().join("flag"));
    let init = |args: &[&str]| {
        bin()
            .args(args)
            .env("SLUICEGATE_INIT_ADMIN", "true")
            .env("SLUICEGATE_DATA_DIR", &from_env)
            .output()
            .unwrap()
    };
    let first = init(&["serve"]);
    assert!(first.status.success(), "{}", stderr(&first));
    assert!(from_env.is_dir() && !from_flag.exists());
    let flagged = init(&["serve", "--data-dir", from_flag.to_str().unwrap()]);
    assert!(flagged.status.success(), "{}", stderr(&flagged));
    assert!(from_flag.is_dir());
    // Help names each variable, never its value: a Secret's passwords are in some.
    let help = bin()
        .args(["serve", "--help"])
        .env("SLUICEGATE_STORE", "postgres://app:hunter2@db:5432/limits")
        .env("SLUICEGATE_DECISIONS", "redis://:hunter2@redis:6379/0")
        .env("SLUICEGATE_LOG_FORMAT", "json")
        .output()
        .unwrap();
    let help = stdout(&help);
    for variable in [
        "SLUICEGATE_MAX_KEYS",
        "SLUICEGATE_DECISIONS",
        "SLUICEGATE_STORE",
        "SLUICEGATE_LOG_FORMAT",
    ] {
        assert!(help.contains(&format!("[env: {variable}]")), "{help}");
    }
    assert!(
        !help.contains("hunter2") && !help.contains("=json"),
        "{help}"
    );
}

/// `sluicegate serve` answers on its port, and stops cleanly (exit 0) on SIGTERM; its
/// logs are JSON lines with `--log-format json`.
#[test]
fn serve_stops_on_sigterm() {
    use std::io::{Read, Write};
    use std::time::{Duration, Instant};
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let listen = format!("127.0.0.1:{port}");
    let data = dir.path().join("data");
    let mut child = serve_json(&listen, &data)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let answer = loop {
        if let Ok(mut stream) = std::net::TcpStream::connect(&listen) {
            stream
                .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                .unwrap();
            let mut text = String::new();
            stream.read_to_string(&mut text).unwrap();
            break text;
        }
        assert!(Instant::now() < deadline, "the server never listened");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        answer.starts_with("HTTP/1.1 200") && answer.ends_with("ok"),
        "{answer}"
    );
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    // 15 s for a loaded machine; a server deaf to TERM never stops.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "{status}");
            break;
        }
        assert!(Instant::now() < deadline, "the server did not stop");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut logs = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut logs)
        .unwrap();
    let serving = json_lines(&logs)
        .into_iter()
        .find(|event| event["fields"]["message"] == "serving");
    let serving = serving.unwrap_or_else(|| panic!("no JSON line says serving: {logs}"));
    assert_eq!(serving["fields"]["decisions"], "memory", "{serving}");
}

/// `sluicegate serve` on `listen`, its store in `data`, logging JSON lines.
fn serve_json(listen: &str, data: &std::path::Path) -> Command {
    let mut serve = bin();
    let data = data.to_str().unwrap();
    serve.args([
        "serve",
        "--listen",
        listen,
        "--data-dir",
        data,
        "--log-format",
        "json",
    ]);
    serve
}

/// Each line of `logs`, which must all be JSON objects.
fn json_lines(logs: &str) -> Vec<serde_json::Value> {
    let parse = |line| serde_json::from_str::<serde_json::Value>(line);
    let events = logs.lines().map(|line| parse(line).map_err(|_| line));
    let events: Result<Vec<_>, _> = events.collect();
    events.unwrap_or_else(|line| panic!("a line that is not JSON: {line:?} in {logs}"))
}

/// With `--log-format json`, a fatal error is a JSON line too, with its exit code.
#[test]
fn a_fatal_error_is_a_json_line_with_json_logs() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let listen = taken.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let out = serve_json(&listen, &data).output().unwrap();
    assert_exit(&out, 4);
    let events = json_lines(&stderr(&out));
    let fatal = events.last().expect("a line");
    assert_eq!(fatal["level"], "ERROR", "{fatal}");
    assert_eq!(fatal["fields"]["exit_code"], 4, "{fatal}");
    let message = fatal["fields"]["message"].as_str().unwrap();
    assert!(message.contains("cannot listen on"), "{message}");
}

/// Flags that cannot serve are refused as bad input (exit 2) with a message, and a
/// malformed URL's password is never repeated.
#[test]
fn flags_that_cannot_serve_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let data = data.to_str().unwrap();
    for (flag, value, said) in [
        ("--max-connections", "0", "--max-connections"),
        ("--grpc-max-streams", "0", "--grpc-max-streams"),
        ("--grpc-max-calls", "0", "--grpc-max-calls"),
        (
            "--store",
            "postgres://app:hunter2@db:port/limits",
            "--store",
        ),
        ("--store", "mysql://app:hunter2@db/limits", "--store"),
        ("--decisions", "redis//:hunter2@redis:6379", "--decisions"),
    ] {
        let out = sluicegate(["serve", "--data-dir", data, flag, value]);
        assert_exit(&out, 2);
        let stderr = stderr(&out);
        assert!(stderr.contains(said), "{flag} {value}: {stderr}");
        assert!(!stderr.contains("hunter2"), "{flag}: {stderr}");
    }
}

/// A policy's `when` and `key` are compiled by `policy validate`: a bad one is named
/// with its file, place and policy.
#[test]
fn policy_validate_compiles_when_and_key() {
    let head = "[policies.api]\nalgorithm = \"fixed-window\"\nlimit = 2\nperiod = \"1m\"\n";
    let good = format!(
        "{head}when = 'descriptors[0][\"tier\"] == \"free\"'\nkey = 'descriptors[0][\"user\"]'\n"
    );
    let (_dir, path) = temp_file("good.toml", &good);
    assert_exit(&sluicegate(["policy", "validate", &path]), 0);
    let (_dir, path) = temp_file(
        "bad.toml",
        &format!("{head}key = 'descriptors[0][\"user\"'\n"),
    );
    let out = sluicegate(["policy", "validate", &path]);
    assert_exit(&out, 2);
    assert_contains(
        &stderr(&out),
        "bad.toml:5:7: policy \"api\": `key`: couldn't parse",
    );
}

/// envoyproxy/ratelimit's YAML: `policy validate` reads it with the parser of `serve
/// --envoy-config` (their README's examples pass), and both refuse a bad file with its
/// place, exiting 2.
#[test]
fn policy_validate_and_serve_read_envoy_yaml() {
    let examples = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../server/tests/data/envoy-ratelimit"
    );
    let out = sluicegate(["policy", "validate", examples]);
    assert_exit(&out, 0);
    assert_contains(
        &stdout(&out),
        "example1.yaml: domain \"mongo_cps\" valid (2 rules)",
    );
    let dir = tempfile::tempdir().unwrap();
    let bad = "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: fortnight\n";
    write(dir.path(), "bad.yml", bad);
    let file = format!("{}/bad.yml", dir.path().to_str().unwrap());
    let out = sluicegate(["policy", "validate", dir.path().to_str().unwrap()]);
    assert_exit(&out, 2);
    let want = format!("{file}:5:13: invalid rate limit unit 'fortnight'");
    assert_contains(&stderr(&out), &want);
    let data = dir.path().join("data");
    let serve = sluicegate([
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        data.to_str().unwrap(),
        "--envoy-config",
        &file,
    ]);
    assert_exit(&serve, 2);
    assert_contains(&stderr(&serve), &want);
}

/// limitador's limits file: `policy validate` reads it with the parser of `serve
/// --limitador-config`, and both refuse a bad file with its place, exiting 2.
#[test]
fn policy_validate_and_serve_read_limitadors_file() {
    let kuadrant = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../server/tests/data/limitador/kuadrant.yaml"
    );
    let out = sluicegate(["policy", "validate", kuadrant]);
    assert_exit(&out, 0);
    assert_contains(
        &stdout(&out),
        "kuadrant.yaml: limitador's limits valid (1 namespaces, 2 limits)",
    );
    let dir = tempfile::tempdir().unwrap();
    let bad = "- namespace: ns\n  seconds: 60\n  conditions: ['descriptors[0][\"a\" ==']\n  variables: []\n";
    write(dir.path(), "limits.yaml", bad);
    let file = format!("{}/limits.yaml", dir.path().to_str().unwrap());
    let out = sluicegate(["policy", "validate", &file]);
    assert_exit(&out, 2);
    let want = format!("{file}:3:16: [0]: couldn't parse descriptors[0][\"a\" ==");
    assert_contains(&stderr(&out), &want);
    let data = dir.path().join("data");
    let serve = sluicegate([
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        data.to_str().unwrap(),
        "--limitador-config",
        &file,
    ]);
    assert_exit(&serve, 2);
    assert_contains(&stderr(&serve), &want);
}
