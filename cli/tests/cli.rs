//! The `tollgate` binary, run as a user runs it.

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// A real `redis-server` on a free loopback port, shared with tollgate-redis's tests.
#[path = "../../storage-redis/tests/common/mod.rs"]
mod common;

fn tollgate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(args)
        .output()
        .unwrap()
}

fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).unwrap()
}

fn stderr(output: &Output) -> String {
    String::from_utf8(output.stderr.clone()).unwrap()
}

fn examples() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/policies.toml")
        .to_str()
        .unwrap()
        .to_owned()
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_owned()
}

#[test]
fn replay_prints_exact_json_lines() {
    let dir = tempfile::tempdir().unwrap();
    let trace = write(
        dir.path(),
        "t.csv",
        "t_us,key,cost\n0,alice,1\n0,alice,1\n0,alice,1\n250000,\"bob, jr\",3\n500000,alice,1\n",
    );
    let out = tollgate(&[
        "replay",
        "--trace",
        &trace,
        "--algorithm",
        "token-bucket",
        "--capacity",
        "2",
        "--rate",
        "2",
        "--period",
        "1s",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        concat!(
            r#"{"t_us":0,"key":"alice","cost":1,"allowed":true,"limit":2,"remaining":1,"retry_after_us":null,"reset_after_us":500000,"delay_us":0}"#,
            "\n",
            r#"{"t_us":0,"key":"alice","cost":1,"allowed":true,"limit":2,"remaining":0,"retry_after_us":null,"reset_after_us":1000000,"delay_us":0}"#,
            "\n",
            r#"{"t_us":0,"key":"alice","cost":1,"allowed":false,"limit":2,"remaining":0,"retry_after_us":500000,"reset_after_us":1000000,"delay_us":0}"#,
            "\n",
            r#"{"t_us":250000,"key":"bob, jr","cost":3,"allowed":false,"limit":2,"remaining":2,"retry_after_us":null,"reset_after_us":0,"delay_us":0}"#,
            "\n",
            r#"{"t_us":500000,"key":"alice","cost":1,"allowed":true,"limit":2,"remaining":0,"retry_after_us":null,"reset_after_us":1000000,"delay_us":0}"#,
            "\n",
        )
    );
}

#[test]
fn replay_is_byte_identical_on_memory_sled_and_redis() {
    let dir = tempfile::tempdir().unwrap();
    let redis = common::Server::start();
    let mut trace = String::from("t_us,key,cost\n");
    let mut t = 1_700_000_000_000_000u64;
    for i in 0..2000u64 {
        t += (i * 7919) % 90_000;
        trace += &format!("{t},user-{},{}\n", i % 7, 1 + i % 3);
    }
    let trace = write(dir.path(), "trace.csv", &trace);
    for (db, policy) in ["api", "login", "reports", "daily"].into_iter().enumerate() {
        let run = |backend: &str| {
            let out = tollgate(&[
                "replay",
                "--trace",
                &trace,
                "--config",
                &examples(),
                "--policy",
                policy,
                "--app",
                "web",
                "--backend",
                backend,
            ]);
            assert!(
                out.status.success(),
                "{policy} on {backend}: {}",
                stderr(&out)
            );
            out.stdout
        };
        let sled = format!("sled:{}", dir.path().join(policy).display());
        // One database per policy: the trace's keys are the same in each.
        let redis = format!("{}{db}", redis.url());
        let memory = run("memory");
        assert_eq!(memory.iter().filter(|&&b| b == b'\n').count(), 2000);
        assert!(memory == run(&sled), "{policy}: memory and sled differ");
        assert!(memory == run(&redis), "{policy}: memory and Redis differ");
    }
}

#[test]
fn bad_files_are_reported_with_their_line() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "[policies.a]\nalgorithm = \"token-bucket\"\ncapacity = = 3\n",
            ":3",
        ),
        (
            "[policies.a]\nalgorithm = \"token-bucket\"\ncapacity = 0\nrate = 1\nperiod = \"1s\"\n",
            ":1",
        ),
        (
            "\n\n[policies.a]\nalgorithm = \"fixed-window\"\nlimit = 3\nperiod = \"1 second\"\n",
            ":6",
        ),
        (
            "[policies.a]\nalgorithm = \"token-bucket\"\nlimit = 3\nperiod = \"1s\"\n",
            ":1",
        ),
        (
            "[policies.a]\nalgorithm = \"sliding-window\"\nlimit = 3\nperiod = \"1s\"\n",
            ":2",
        ),
    ];
    for (i, (text, line)) in cases.iter().enumerate() {
        let config = write(dir.path(), &format!("{i}.toml"), text);
        let out = tollgate(&[
            "check", "k", "--config", &config, "--policy", "a", "--now", "0",
        ]);
        assert_eq!(out.status.code(), Some(2), "case {i}");
        let message = stderr(&out);
        assert!(
            message.contains(&format!("{config}{line}")),
            "case {i}: {message}"
        );
    }
    let bad_traces = [
        (
            "back.csv",
            "t_us,key,cost\n5,a,1\n4,a,1\n",
            "back.csv:3: t_us goes backwards",
        ),
        (
            "header.csv",
            "time,key,cost\n5,a,1\n",
            "header.csv:1: the header must be t_us,key,cost",
        ),
        (
            "cost.csv",
            "t_us,key,cost\n5,a,-1\n",
            "cost.csv:2: cost must be a whole number",
        ),
    ];
    for (name, text, message) in bad_traces {
        let trace = write(dir.path(), name, text);
        let out = tollgate(&[
            "replay",
            "--trace",
            &trace,
            "--algorithm",
            "fixed-window",
            "--limit",
            "1",
            "--period",
            "1s",
        ]);
        assert_eq!(out.status.code(), Some(2));
        assert!(stderr(&out).contains(message), "{}", stderr(&out));
    }
}

#[test]
fn bad_flags_exit_2_with_a_message() {
    let window = "--algorithm fixed-window --limit 1 --period 1s";
    for args in [
        "replay --trace x.csv --algorithm fixed-window --limit 1".to_owned(),
        "check k --algorithm fixed-window --limit 1 --period 1sec".to_owned(),
        "check k --algorithm fixed-window --capacity 1 --period 1s".to_owned(),
        format!("check k {window} --backend ftp://x"),
        format!("check k {window} --backend redis://127.0.0.1:port"),
        format!("simulate {window} --traffic steady --duration 1s"),
        format!("simulate {window} --traffic steady:rate=1,jitter=2 --duration 1s"),
        "check k --config /nonexistent.toml --policy a".to_owned(),
        "frobnicate".to_owned(),
    ] {
        let out = tollgate(&args.split_whitespace().collect::<Vec<_>>());
        assert_eq!(out.status.code(), Some(2), "{args}");
        assert!(!stderr(&out).trim().is_empty(), "{args}");
    }
}

#[test]
fn a_policy_refuses_apps_it_does_not_serve() {
    let check = |app: &str| {
        tollgate(&[
            "check",
            "k",
            "--config",
            &examples(),
            "--policy",
            "api",
            "--app",
            app,
            "--now",
            "0",
        ])
    };
    assert_eq!(check("web").status.code(), Some(0));
    let out = check("batch");
    assert_eq!(out.status.code(), Some(3));
    assert!(stderr(&out).contains("no such policy for this app"));
}

#[test]
fn check_peek_reset_inspect_on_sled_and_redis() {
    let dir = tempfile::tempdir().unwrap();
    let redis = common::Server::start();
    let sled = format!("sled:{}", dir.path().join("db").display());
    for backend in [sled, redis.url()] {
        check_peek_reset_inspect(&backend);
    }
}

fn check_peek_reset_inspect(backend: &str) {
    let run = |command: &str| {
        tollgate(&[
            command,
            "alice",
            "--algorithm",
            "fixed-window",
            "--limit",
            "2",
            "--period",
            "1h",
            "--backend",
            backend,
            "--now",
            "7200000000",
        ])
    };
    assert_eq!(run("inspect").status.code(), Some(0));
    assert!(stdout(&run("inspect")).contains("fresh"));
    assert_eq!(run("check").status.code(), Some(0));
    assert_eq!(run("check").status.code(), Some(0));
    let denied = run("check");
    assert_eq!(denied.status.code(), Some(1));
    assert!(stdout(&denied).contains(r#""allowed":false"#));
    assert!(stdout(&denied).contains(r#""retry_after_us":3600000000"#));
    let inspected = stdout(&run("inspect"));
    assert!(inspected.contains("count: 2"), "{inspected}");
    assert!(inspected.contains("encoded: 0101"), "{inspected}");
    assert_eq!(run("peek").status.code(), Some(1));
    assert_eq!(run("reset").status.code(), Some(0));
    assert_eq!(run("peek").status.code(), Some(0));
}

#[test]
fn an_unreachable_redis_fails_with_exit_code_4_within_the_timeout() {
    let backend = format!("redis://127.0.0.1:{}/", common::free_port());
    let start = Instant::now();
    let out = tollgate(&[
        "check",
        "k",
        "--algorithm",
        "token-bucket",
        "--capacity",
        "1",
        "--rate",
        "1",
        "--period",
        "1s",
        "--backend",
        &backend,
    ]);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    assert!(stderr(&out).contains("unavailable"), "{}", stderr(&out));
    assert!(start.elapsed() < Duration::from_secs(5));
}

#[test]
fn a_policy_beyond_the_lua_range_is_refused_on_redis() {
    let redis = common::Server::start();
    let out = tollgate(&[
        "check",
        "k",
        "--algorithm",
        "fixed-window",
        "--limit",
        "2000000",
        "--period",
        "1s",
        "--backend",
        &redis.url(),
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("cannot run on Redis"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn simulate_prints_a_summary_and_a_valid_chart() {
    let dir = tempfile::tempdir().unwrap();
    let chart = dir.path().join("chart.svg");
    let out = tollgate(&[
        "simulate",
        "--config",
        &examples(),
        "--policy",
        "api",
        "--app",
        "web",
        "--traffic",
        "steady:rate=20,keys=1",
        "--duration",
        "10s",
        "--chart",
        chart.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let summary = stdout(&out);
    // 10 at once, then 5 per second for the rest of the 10 s.
    assert!(
        summary.contains("offered                              200"),
        "{summary}"
    );
    assert!(
        summary.contains("admitted                             59 (29.5%)"),
        "{summary}"
    );
    assert!(
        summary.contains("most acting in any 1000 ms window    14"),
        "{summary}"
    );
    let svg = std::fs::read_to_string(&chart).unwrap();
    let doc = roxmltree::Document::parse(&svg).expect("the chart is well-formed XML");
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), "svg");
    assert_eq!(
        root.tag_name().namespace(),
        Some("http://www.w3.org/2000/svg")
    );
    let texts: Vec<&str> = doc.descendants().filter_map(|n| n.text()).collect();
    for label in ["admitted", "denied", "time", "0 s", "10.000 s"] {
        assert!(texts.contains(&label), "missing {label}: {texts:?}");
    }
    assert_eq!(
        doc.descendants().filter(|n| n.has_tag_name("line")).count(),
        2
    );
    let bars = doc.descendants().filter(|n| n.has_tag_name("rect")).count();
    assert_eq!(bars, 2 * 60 + 2);
}

#[test]
fn every_command_has_help() {
    for command in ["simulate", "replay", "check", "peek", "reset", "inspect"] {
        let out = tollgate(&[command, "--help"]);
        assert!(out.status.success());
        assert!(stdout(&out).contains("Usage: tollgate"), "{command}");
    }
    let out = tollgate(&["--help"]);
    assert!(stdout(&out).contains("Exit codes"));
}
