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
            ":3:12: policy \"a\": `capacity` must be between 1 and 1000000000, got 0",
        ),
        (
            "[policies.a]\nalgorithm = \"fixed-window\"\nlimit = 3\n  period = \"400d\"\n",
            ":4:12: policy \"a\": `period` must be between 1 µs and 366 days, got 400 days",
        ),
        (
            "[policies.a]\nalgorithm = \"token-bucket\"\nperiod = \"1s\"\n",
            ":1:1: policy \"a\": token-bucket needs `capacity` and `rate`",
        ),
        (
            "\n\n[policies.a]\nalgorithm = \"fixed-window\"\nlimit = 3\nperiod = \"1 second\"\n",
            ":6",
        ),
        (
            "[policies.a]\nalgorithm = \"token-bucket\"\nlimit = 3\nperiod = \"1s\"\n",
            ":1:1: policy \"a\": token-bucket needs `capacity` and `rate`; token-bucket takes `capacity`, `rate` and `period`, not `limit`",
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
            "back.csv:3: t_us goes backwards (4 after 5)",
        ),
        (
            "fields.csv",
            "t_us,key,cost\n5,a,1\n6,a\n",
            "fields.csv:3: expected 3 fields (t_us,key,cost), found 2",
        ),
        (
            "empty.csv",
            "",
            "empty.csv:1: the header must be t_us,key,cost",
        ),
        (
            "time.csv",
            "t_us,key,cost\n-5,a,1\n",
            "time.csv:2: t_us must be a whole number of microseconds up to 2^62, got \"-5\"",
        ),
        (
            "header.csv",
            "time,key,cost\n5,a,1\n",
            "header.csv:1: the header must be t_us,key,cost",
        ),
        (
            "cost.csv",
            "t_us,key,cost\n5,a,-1\n",
            "cost.csv:2: cost must be a whole number, got \"-1\"",
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
    on_sled_and_redis(|backend, _| check_peek_reset_inspect(backend));
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
    if let Some(path) = backend.strip_prefix("sled:") {
        // Reading never creates a database.
        let out = run("inspect");
        assert_eq!(out.status.code(), Some(2));
        assert!(stderr(&out).contains("no database at"), "{}", stderr(&out));
        assert!(!Path::new(path).exists());
    } else {
        assert_eq!(run("inspect").status.code(), Some(0));
        assert!(stdout(&run("inspect")).contains("state      fresh (nothing stored)"));
    }
    assert_eq!(run("check").status.code(), Some(0));
    assert_eq!(run("check").status.code(), Some(0));
    let denied = run("check");
    assert_eq!(denied.status.code(), Some(1));
    assert!(stdout(&denied).contains(r#""allowed":false"#));
    assert!(stdout(&denied).contains(r#""retry_after_us":3600000000"#));
    let inspected = stdout(&run("inspect"));
    assert!(inspected.contains("window count  2 of 2\n"), "{inspected}");
    assert!(
        inspected.contains("fresh again   in 1 h (at 10800000000 µs)\n"),
        "{inspected}"
    );
    assert!(inspected.contains("encoded       0101"), "{inspected}");
    assert_eq!(run("peek").status.code(), Some(1));
    let reset = run("reset");
    assert_eq!(reset.status.code(), Some(0));
    assert_eq!(
        stdout(&reset),
        "alice: reset (its next request starts fresh)\n"
    );
    assert_eq!(run("peek").status.code(), Some(0));
    assert!(stdout(&run("inspect")).contains("state      fresh (nothing stored)"));
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
    // A time within the core's range but beyond the scripts' exact range.
    let url = redis.url();
    let out = tollgate(
        &with(
            &[
                "check",
                "k",
                "--backend",
                &url,
                "--now",
                "4611686018427387904",
            ],
            &BUCKET,
        )
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>(),
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("now is 4611686018427387904, beyond 4503599627370496"),
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
    // 10 at once, then 5 per second for the rest of the 10 s; the summary aligned.
    for row in [
        "offered                                 200 over 10 s\n",
        "admitted                                59 (29.5%)\n",
        "denied                                  141 (70.5%)\n",
        "most units acting in any 1 s, one key   14\n",
        "most units acting in any 1 s, all keys  14\n",
        "delay p50 / p90 / p99 / max             0 s / 0 s / 0 s / 0 s\n",
    ] {
        assert!(summary.contains(row), "{row}{summary}");
    }
    let svg = std::fs::read_to_string(&chart).unwrap();
    let doc = roxmltree::Document::parse(&svg).expect("the chart is well-formed XML");
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), "svg");
    assert_eq!(
        root.tag_name().namespace(),
        Some("http://www.w3.org/2000/svg")
    );
    let texts: Vec<&str> = doc.descendants().filter_map(|n| n.text()).collect();
    // Round ticks in one unit, axis labels, a legend naming the limit.
    for label in [
        "admitted",
        "denied",
        "sustained rate: 5 per 1 s",
        "time",
        "requests per 1 s",
        "0",
        "2 s",
        "10 s",
        "5",
        "20",
    ] {
        assert!(texts.contains(&label), "missing {label}: {texts:?}");
    }
    let class = |name: &str| {
        doc.descendants()
            .filter(|n| n.attribute("class") == Some(name))
            .collect::<Vec<_>>()
    };
    assert_eq!(class("axis").len(), 2);
    assert_eq!(class("limit").len(), 1);
    // Gridlines: y at 0, 5, 10, 15, 20; x every 2 s.
    assert_eq!(class("grid").len(), 5 + 6);
    // Bins of one period: ten of them, each admitting what the bucket refills.
    let heights = |name: &str| -> Vec<f64> {
        class(name)
            .iter()
            .map(|n| n.attribute("height").unwrap().parse().unwrap())
            .collect()
    };
    let admitted = heights("admitted");
    assert_eq!(admitted.len(), 10);
    assert!(
        admitted[1..].iter().all(|&h| h == admitted[1]),
        "{admitted:?}"
    );
    assert!(admitted[0] > admitted[1]);
    // Denied is hatched, not a second flat colour.
    assert!(class("denied")
        .iter()
        .all(|n| n.attribute("fill") == Some("url(#hatch)")));
}

#[test]
fn steady_traffic_fills_every_bin_alike_on_any_run_length() {
    let dir = tempfile::tempdir().unwrap();
    for (duration, bins, tick) in [("10s", 10, "4 s"), ("2d", 96, "24 h")] {
        let chart = dir.path().join(format!("{duration}.svg"));
        let out = tollgate(&[
            "simulate",
            "--algorithm",
            "fixed-window",
            "--limit",
            "10",
            "--period",
            "1s",
            "--traffic",
            "steady:rate=20",
            "--duration",
            duration,
            "--chart",
            chart.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "{}", stderr(&out));
        let svg = std::fs::read_to_string(&chart).unwrap();
        let doc = roxmltree::Document::parse(&svg).unwrap();
        let admitted: Vec<&str> = doc
            .descendants()
            .filter(|n| n.attribute("class") == Some("admitted"))
            .map(|n| n.attribute("height").unwrap())
            .collect();
        assert_eq!(admitted.len(), bins, "{duration}");
        assert!(
            admitted.iter().all(|&h| h == admitted[0]),
            "{duration}: {admitted:?}"
        );
        let texts: Vec<&str> = doc.descendants().filter_map(|n| n.text()).collect();
        assert!(texts.contains(&tick), "{duration}: {texts:?}");
        assert!(texts.contains(&"limit: 10 per 1 s"), "{duration}");
    }
}

#[test]
fn every_command_has_help() {
    for command in [
        "simulate", "replay", "check", "peek", "reset", "inspect", "purge", "lock", "lease",
    ] {
        let out = tollgate(&[command, "--help"]);
        assert!(out.status.success());
        assert!(stdout(&out).contains("Usage: tollgate"), "{command}");
    }
    for command in ["acquire", "release", "renew"] {
        for group in ["lock", "lease"] {
            let out = tollgate(&[group, command, "--help"]);
            assert!(
                stdout(&out).contains("--owner <OWNER>"),
                "{group} {command}"
            );
        }
    }
    let out = tollgate(&["--help"]);
    assert!(stdout(&out).contains("Exit codes"));
}

fn tollgate_with_stdin(args: &[&str], input: &str) -> Output {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
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

const BUCKET: [&str; 8] = [
    "--algorithm",
    "token-bucket",
    "--capacity",
    "10",
    "--rate",
    "5",
    "--period",
    "1s",
];

fn with(prefix: &[&str], rest: &[&str]) -> Vec<String> {
    prefix.iter().chain(rest).map(|s| (*s).to_owned()).collect()
}

#[test]
fn every_command_reports_a_full_disk_the_same_way() {
    let dir = tempfile::tempdir().unwrap();
    let trace = write(dir.path(), "t.csv", "t_us,key,cost\n0,a,1\n");
    let sled = format!("sled:{}", dir.path().join("db").display());
    let chart = dir.path().join("c.svg");
    let chart = chart.to_str().unwrap();
    let commands: Vec<Vec<String>> = vec![
        with(&["check", "a", "--backend", &sled, "--now", "0"], &BUCKET),
        with(&["peek", "a", "--backend", &sled, "--now", "0"], &BUCKET),
        with(&["inspect", "a", "--backend", &sled, "--now", "0"], &BUCKET),
        with(&["inspect", "a", "--json", "--backend", &sled], &BUCKET),
        with(&["reset", "a", "--backend", &sled], &BUCKET),
        with(&["purge", "--backend", &sled], &BUCKET),
        with(
            &[
                "lock",
                "acquire",
                "l",
                "--owner",
                "o",
                "--ttl",
                "1s",
                "--backend",
                &sled,
            ],
            &[],
        ),
        with(
            &[
                "lock",
                "renew",
                "l",
                "--owner",
                "o",
                "--ttl",
                "1s",
                "--backend",
                &sled,
            ],
            &[],
        ),
        with(
            &["lock", "release", "l", "--owner", "o", "--backend", &sled],
            &[],
        ),
        with(&["lock", "inspect", "l", "--backend", &sled], &[]),
        with(
            &["lease", "acquire", "k", "--owner", "o", "--backend", &sled],
            &["--config", &examples(), "--policy", "report-workers"],
        ),
        with(
            &["inspect", "k", "--backend", &sled],
            &["--config", &examples(), "--policy", "report-workers"],
        ),
        with(&["replay", "--trace", &trace], &BUCKET),
        with(
            &["simulate", "--traffic", "steady:rate=5", "--duration", "1s"],
            &BUCKET,
        ),
        with(
            &[
                "simulate",
                "--traffic",
                "steady:rate=5",
                "--duration",
                "1s",
                "--chart",
                "/dev/full",
            ],
            &BUCKET,
        ),
        with(
            &[
                "simulate",
                "--traffic",
                "steady:rate=5",
                "--duration",
                "1s",
                "--chart",
                chart,
            ],
            &BUCKET,
        ),
    ];
    let help = vec!["--help".to_owned()];
    let version = vec!["--version".to_owned()];
    let check_help = vec!["check".to_owned(), "--help".to_owned()];
    for args in commands.into_iter().chain([help, version, check_help]) {
        let out = Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .args(&args)
            .stdout(std::fs::File::create("/dev/full").unwrap())
            .output()
            .unwrap();
        let message = stderr(&out);
        assert_eq!(out.status.code(), Some(5), "{args:?}: {message}");
        assert!(
            message.starts_with("tollgate: cannot write") && message.contains("No space left"),
            "{args:?}: {message}"
        );
        assert!(!message.contains("panicked"), "{args:?}: {message}");
    }
}

#[test]
fn negative_numbers_and_times_out_of_range_say_what_is_wanted() {
    for (args, wanted) in [
        (
            with(&["check", "k", "--now", "0"], &[
                "--algorithm",
                "token-bucket",
                "--capacity",
                "-10",
                "--rate",
                "1",
                "--period",
                "1s",
            ]),
            "'--capacity <CAPACITY>': must be a non-negative integer, got \"-10\"",
        ),
        (
            with(&["check", "k", "--now", "0"], &[
                "--algorithm",
                "fixed-window",
                "--limit",
                "1",
                "--period",
                "-5s",
            ]),
            "'--period <PERIOD>': bad duration \"-5s\": use a whole number with us, ms, s, m, h or d",
        ),
        (
            with(&["check", "k", "--cost", "-1"], &BUCKET),
            "'--cost <COST>': must be a non-negative integer, got \"-1\"",
        ),
        (
            with(&["check", "k", "--now", "-5"], &BUCKET),
            "must be a non-negative integer of µs since the Unix epoch, at most 4611686018427387904 (2^62), got \"-5\"",
        ),
        (
            with(&["check", "k", "--now", "18446744073709551615"], &BUCKET),
            "at most 4611686018427387904 (2^62), got \"18446744073709551615\"",
        ),
        (
            with(&["check", "k", "--now", "4611686018427387905"], &BUCKET),
            "at most 4611686018427387904 (2^62)",
        ),
    ] {
        let out = tollgate(&args.iter().map(String::as_str).collect::<Vec<_>>());
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let message = stderr(&out);
        assert!(message.contains(wanted), "{args:?}: {message}");
        assert!(!message.contains("tip:"), "{message}");
    }
    // The top of the range itself is accepted.
    let out = tollgate(
        &with(&["check", "k", "--now", "4611686018427387904"], &BUCKET)
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

#[test]
fn everything_missing_from_a_policy_is_reported_at_once() {
    let config = examples();
    for (args, wanted) in [
        (
            "check k --algorithm token-bucket".to_owned(),
            "tollgate: token-bucket needs --capacity, --rate and --period\n",
        ),
        (
            "check k --algorithm fixed-window --capacity 3".to_owned(),
            "tollgate: fixed-window needs --limit and --period; fixed-window takes --limit and --period, not --capacity\n",
        ),
        (
            "check alice --policy api".to_owned(),
            "tollgate: --policy api needs --config FILE, the policy file that defines it\n",
        ),
        (
            format!("check alice --config {config}"),
            "needs --policy NAME",
        ),
        (
            format!("check alice --config {config} --policy api --algorithm fixed-window"),
            "give either --config FILE --policy NAME or --algorithm with its parameters, not both",
        ),
        (
            "check alice".to_owned(),
            "tollgate: no policy given: use --config FILE --policy NAME, or --algorithm with --limit N --period D",
        ),
    ] {
        let out = tollgate(&args.split_whitespace().collect::<Vec<_>>());
        assert_eq!(out.status.code(), Some(2), "{args}");
        assert!(stderr(&out).contains(wanted), "{args}: {}", stderr(&out));
    }
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
            tollgate(&args.iter().map(String::as_str).collect::<Vec<_>>())
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
            stdout(&tollgate(&all))
        };
        assert!(inspect(&BUCKET).contains("stored as  tollgate:token-bucket-10-5-1s:alice\n"));
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
            "tollgate:api:alice",
            "tollgate:daily:alice",
            "tollgate:login:alice",
            "tollgate:reports:alice"
        ]
    );
}

#[test]
fn a_sled_database_is_created_only_by_a_write_in_an_existing_directory() {
    let dir = tempfile::tempdir().unwrap();
    let run = |command: &str, path: &Path| {
        let backend = format!("sled:{}", path.display());
        tollgate(
            &with(
                &[command, "a", "--backend", &backend, "--now", "0"],
                &BUCKET,
            )
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
        )
    };
    let missing = dir.path().join("no/such/dir/db");
    for command in ["check", "peek", "inspect", "reset"] {
        let out = run(command, &missing);
        assert_eq!(out.status.code(), Some(2), "{command}");
        assert!(stderr(&out).contains("no database at"), "{}", stderr(&out));
    }
    assert!(!dir.path().join("no").exists());
    let new = dir.path().join("db");
    for command in ["peek", "inspect"] {
        let out = run(command, &new);
        assert_eq!(out.status.code(), Some(2));
        assert!(stderr(&out).contains("commands that only read or delete never create one"));
        assert!(!new.exists());
    }
    assert_eq!(run("check", &new).status.code(), Some(0));
    assert!(new.exists());
    assert_eq!(run("peek", &new).status.code(), Some(0));
}

#[test]
fn a_sled_database_in_use_by_another_process_is_said_plainly() {
    let dir = tempfile::tempdir().unwrap();
    let backend = format!("sled:{}", dir.path().join("db").display());
    // A replay reading standard input holds the database until its input ends.
    let mut holder = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(with(
            &["replay", "--trace", "-", "--backend", &backend],
            &BUCKET,
        ))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while !dir.path().join("db").join("conf").exists() {
        assert!(start.elapsed() < Duration::from_secs(10));
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(200));
    let out = tollgate(
        &with(
            &["check", "a", "--backend", &backend, "--now", "0"],
            &BUCKET,
        )
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>(),
    );
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    assert_eq!(
        stderr(&out),
        format!(
            "tollgate: the sled database at {} is in use by another process; sled allows one process at a time\n",
            &backend["sled:".len()..]
        )
    );
    {
        use std::io::Write;
        let mut input = holder.stdin.take().unwrap();
        input.write_all(b"t_us,key,cost\n0,a,1\n").unwrap();
    }
    let held = holder.wait_with_output().unwrap();
    assert!(held.status.success());
    assert!(String::from_utf8_lossy(&held.stdout).contains(r#""remaining":9"#));
}

#[test]
fn sled_replays_alike_with_either_durability() {
    let dir = tempfile::tempdir().unwrap();
    let mut trace = String::from("t_us,key,cost\n");
    for i in 0..300u64 {
        trace += &format!("{},user-{},1\n", i * 37_000, i % 4);
    }
    let trace = write(dir.path(), "t.csv", &trace);
    let run = |backend: &str, durability: &str| {
        let out = tollgate(
            &with(
                &[
                    "replay",
                    "--trace",
                    &trace,
                    "--backend",
                    backend,
                    "--durability",
                    durability,
                ],
                &BUCKET,
            )
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
        );
        assert!(out.status.success(), "{}", stderr(&out));
        out.stdout
    };
    let memory = run("memory", "every-decision");
    for durability in ["every-decision", "background"] {
        let sled = format!("sled:{}", dir.path().join(durability).display());
        assert!(memory == run(&sled, durability), "{durability}");
    }
    let out = tollgate(&["replay", "--trace", &trace, "--durability", "sometimes"]);
    assert_eq!(out.status.code(), Some(2));
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
        tollgate(&args.iter().map(String::as_str).collect::<Vec<_>>())
    };
    assert_eq!(run("check", &["--cost", "3"]).status.code(), Some(0));
    let json: serde_json::Value =
        serde_json::from_slice(&run("inspect", &["--json"]).stdout).unwrap();
    assert_eq!(
        json,
        serde_json::json!({
            "key": "alice",
            "stored_key": "tollgate:token-bucket-10-5-1s:alice",
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
fn traces_trim_keys_and_read_standard_input() {
    let trace = "t_us,key,cost\n 0 , alice ,1\n0,alice, 1\n\n";
    let out = tollgate_with_stdin(
        &with(&["replay", "--trace", "-"], &BUCKET)
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
        trace,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let lines: Vec<&str> = std::str::from_utf8(&out.stdout).unwrap().lines().collect();
    assert_eq!(lines.len(), 2);
    assert!(lines[0].contains(r#""key":"alice","cost":1,"allowed":true,"limit":10,"remaining":9"#));
    assert!(lines[1].contains(r#""key":"alice","cost":1,"allowed":true,"limit":10,"remaining":8"#));
    let out = tollgate_with_stdin(
        &with(&["replay", "--trace", "-"], &BUCKET)
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
        "t_us,key,cost\n0,a,1\n1,a\n",
    );
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out),
        "tollgate: stdin:3: expected 3 fields (t_us,key,cost), found 2\n"
    );
}

#[test]
fn simulations_too_large_or_empty_are_refused_at_once() {
    for (traffic, duration, wanted) in [
        (
            "steady:rate=1",
            "300000d",
            "offers about 25920000000 requests",
        ),
        ("steady:rate=1000000000", "1000d", "offers about"),
        (
            "burst:size=18446744073709551615,every=1us",
            "1s",
            "offers about",
        ),
        ("burst:size=2,every=1us", "18446744073709ms", "offers about"),
        ("poisson:rate=1000000000,seed=1", "1h", "offers about"),
        ("steady:rate=1", "0s", "--duration must be more than 0"),
    ] {
        let start = Instant::now();
        let out = tollgate(
            &with(
                &["simulate", "--traffic", traffic, "--duration", duration],
                &BUCKET,
            )
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
        );
        assert!(start.elapsed() < Duration::from_secs(5), "{traffic}");
        assert_eq!(out.status.code(), Some(2), "{traffic}: {}", stderr(&out));
        assert!(stderr(&out).contains(wanted), "{traffic}: {}", stderr(&out));
        if wanted.starts_with("offers") {
            assert!(
                stderr(&out).contains("shorten --duration"),
                "{}",
                stderr(&out)
            );
        }
    }
    // Huge bursts and periods within the cap: exact figures, no overflow.
    let out = tollgate(&[
        "simulate",
        "--algorithm",
        "fixed-window",
        "--limit",
        "1000000000",
        "--period",
        "366d",
        "--traffic",
        "burst:size=1000,every=366d,cost=1000000000",
        "--duration",
        "732d",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out)
            .lines()
            .any(|l| l.split_whitespace().eq(["admitted", "2", "(0.1%)"])),
        "{}",
        stdout(&out)
    );
}

#[test]
fn memory_state_does_not_outlive_the_command_and_commands_say_so() {
    for command in ["inspect", "reset"] {
        let out = tollgate(
            &with(&[command, "a"], &BUCKET)
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>(),
        );
        assert_eq!(out.status.code(), Some(2), "{command}");
        assert!(
            stderr(&out).contains("the memory backend keeps states only while one command runs"),
            "{command}: {}",
            stderr(&out)
        );
    }
}

#[test]
fn a_long_simulation_shows_progress_on_a_terminal_only() {
    let args = with(
        &[
            "simulate",
            "--traffic",
            "steady:rate=100000",
            "--duration",
            "20s",
        ],
        &BUCKET,
    );
    let quoted: Vec<String> = std::iter::once(env!("CARGO_BIN_EXE_tollgate").to_owned())
        .chain(args.iter().cloned())
        .collect();
    // `script` gives the command a terminal; its output is what the terminal showed.
    let out = Command::new("script")
        .args(["-qec", &quoted.join(" "), "/dev/null"])
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(shown.contains("50% simulated"), "{shown}");
    assert!(shown.contains("offered"), "{shown}");
    let piped = tollgate(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(!stderr(&piped).contains("simulated"));
}

#[test]
fn a_memory_replay_holds_at_most_max_keys_and_warns_if_it_forgot_a_limited_key() {
    let dir = tempfile::tempdir().unwrap();
    // 2000 distinct keys, each fresh again 200 ms after its one request.
    let mut trace = String::from("t_us,key,cost\n");
    for i in 0..2000u64 {
        trace += &format!("{},k{i},1\n", i * 1000);
    }
    let trace = write(dir.path(), "t.csv", &trace);
    let replay = |max_keys: &str| {
        tollgate(
            &with(
                &["replay", "--trace", &trace, "--max-keys", max_keys],
                &BUCKET,
            )
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
        )
    };
    let unbounded = replay("1000000");
    // 200 keys are limited at any time: room for them loses nothing.
    let bounded = replay("1000");
    assert!(bounded.status.success());
    assert_eq!(bounded.stdout, unbounded.stdout);
    assert_eq!(stderr(&bounded), "");
    // Too little room: the same decisions here (one request per key), but a warning.
    let tight = replay("10");
    assert!(tight.status.success());
    assert!(
        stderr(&tight).contains("keys were forgotten before their state was fresh"),
        "{}",
        stderr(&tight)
    );
}

#[test]
fn the_readme_shows_what_its_first_command_prints() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .current_dir(dir.path())
        .args([
            "simulate",
            "--config",
            &examples(),
            "--policy",
            "api",
            "--app",
            "web",
            "--traffic",
            "steady:rate=20",
            "--duration",
            "10s",
            "--chart",
            "api.svg",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"))
            .unwrap();
    let shown = readme
        .split("```text\n")
        .nth(1)
        .and_then(|block| block.split("```").next())
        .unwrap();
    assert_eq!(stdout(&out), shown);
    assert!(readme.contains(
        "cargo run -p tollgate -- simulate --config examples/policies.toml --policy api --app web --traffic steady:rate=20 --duration 10s --chart api.svg"
    ));
}

#[test]
fn a_limit_far_above_the_traffic_does_not_flatten_the_bars() {
    let dir = tempfile::tempdir().unwrap();
    let chart = dir.path().join("c.svg");
    let out = tollgate(&[
        "simulate",
        "--algorithm",
        "fixed-window",
        "--limit",
        "1000000",
        "--period",
        "1s",
        "--traffic",
        "steady:rate=10",
        "--duration",
        "10s",
        "--chart",
        chart.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let svg = std::fs::read_to_string(&chart).unwrap();
    let doc = roxmltree::Document::parse(&svg).unwrap();
    assert!(!doc
        .descendants()
        .any(|n| n.attribute("class") == Some("limit")));
    let texts: Vec<&str> = doc.descendants().filter_map(|n| n.text()).collect();
    assert!(texts.contains(&"limit: 1000000 per 1 s (above the plot)"));
    // The bars reach the top tick: the axis is scaled to them.
    assert!(texts.contains(&"10"), "{texts:?}");
}

#[test]
fn a_state_of_another_algorithm_is_named_with_its_key_as_text() {
    let dir = tempfile::tempdir().unwrap();
    let backend = format!("sled:{}", dir.path().join("db").display());
    // Crafted prefixes put a sliding-log state where the bucket looks.
    let out = tollgate(&[
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
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = tollgate(
        &with(
            &[
                "check",
                "alice",
                "--prefix",
                "login:",
                "--backend",
                &backend,
                "--now",
                "0",
            ],
            &BUCKET,
        )
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>(),
    );
    assert_eq!(out.status.code(), Some(4));
    assert_eq!(
        stderr(&out),
        "tollgate: key \"alice\" holds a state tollgate cannot read: state is a sliding log's, expected a token bucket's\n"
    );
}

#[test]
fn a_reader_that_stops_early_ends_the_command_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let mut trace = String::from("t_us,key,cost\n");
    for i in 0..200_000u64 {
        trace += &format!("{i},k{},1\n", i % 100);
    }
    let trace = write(dir.path(), "t.csv", &trace);
    let mut child = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(with(&["replay", "--trace", &trace], &BUCKET))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Read;
        let mut first = [0u8; 100];
        child.stdout.take().unwrap().read_exact(&mut first).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(5));
    assert_eq!(stderr(&out), "");
}

/// Runs `tollgate` with `args` as owned strings.
fn run_all(args: &[String]) -> Output {
    tollgate(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

/// `redis-cli` against the test's server: how an operator or another app writes a key.
fn redis_cli(server: &common::Server, args: &[&[u8]]) -> String {
    use std::os::unix::ffi::OsStrExt;
    let out = Command::new("redis-cli")
        .args(["-p", &server.port.to_string()])
        .args(args.iter().map(|a| std::ffi::OsStr::from_bytes(a)))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    stdout(&out)
}

/// Writes `value` under `key` in the sled database at `path`, in the CLI's tree, as
/// another program might; the database is closed again before returning.
fn sled_put(path: &Path, key: &[u8], value: &[u8]) {
    let db = sled::open(path).unwrap();
    db.open_tree("tollgate")
        .unwrap()
        .insert(key, value)
        .unwrap();
    db.flush().unwrap();
}

fn sled_get(path: &Path, key: &[u8]) -> Option<Vec<u8>> {
    let db = sled::open(path).unwrap();
    let value = db.open_tree("tollgate").unwrap().get(key).unwrap();
    value.map(|v| v.to_vec())
}

/// Not a state: version 1, a token bucket's tag, then bytes that do not fit it.
const GARBAGE: &[u8] = b"\x01\x04not a bucket";
const ALICE: &str = "tollgate:token-bucket-10-5-1s:alice";

/// Issue 16 item 4: the same garbage bytes give the same message and exit code from
/// `check`, `peek`, `inspect` and `reset`, on sled and on Redis (the libraries' words,
/// the core decoder's reason, the key as text); a Redis list is named as such by every
/// command; nothing is changed or deleted.
#[test]
fn a_key_tollgate_cannot_read_gives_one_message_from_every_command() {
    let dir = tempfile::tempdir().unwrap();
    let redis = common::Server::start();
    let path = dir.path().join("db");
    let sled = format!("sled:{}", path.display());
    // A database with one state in it, then the garbage under alice's key.
    assert_eq!(
        run_all(&with(
            &["check", "bob", "--backend", &sled, "--now", "0"],
            &BUCKET
        ))
        .status
        .code(),
        Some(0)
    );
    sled_put(&path, ALICE.as_bytes(), GARBAGE);
    redis_cli(&redis, &[b"SET", ALICE.as_bytes(), GARBAGE]);
    let mut messages = Vec::new();
    for backend in [sled.as_str(), &redis.url()] {
        for command in ["check", "peek", "inspect", "reset"] {
            let out = run_all(&with(
                &[command, "alice", "--backend", backend, "--now", "0"],
                &BUCKET,
            ));
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
        "tollgate: key \"alice\" holds a state tollgate cannot read: state field tat is invalid for these parameters\n"
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
        let out = run_all(&with(
            &[command, "alice", "--backend", &redis.url(), "--now", "0"],
            &BUCKET,
        ));
        assert_eq!(out.status.code(), Some(4), "{command}");
        assert_eq!(
            stderr(&out),
            "tollgate: key \"alice\" holds a Redis list, not a tollgate state\n",
            "{command}"
        );
    }
    assert_eq!(
        redis_cli(&redis, &[b"LRANGE", ALICE.as_bytes(), b"0", b"-1"]),
        "x\n"
    );
}

/// Issue 17 item 2: `reset` deletes only tollgate states inside the policy's namespace:
/// an application's string or list under the namespaced key is refused and kept, and a
/// key outside the namespace (`session:42`) is never touched.
#[test]
fn reset_touches_only_tollgate_states_inside_the_namespace() {
    let dir = tempfile::tempdir().unwrap();
    let redis = common::Server::start();
    let path = dir.path().join("db");
    let sled = format!("sled:{}", path.display());
    let reset =
        |key: &str, backend: &str| run_all(&with(&["reset", key, "--backend", backend], &BUCKET));
    let outside = b"session:42".as_slice();
    let session = "tollgate:token-bucket-10-5-1s:session:42";
    assert_eq!(
        run_all(&with(
            &["check", "bob", "--backend", &sled, "--now", "0"],
            &BUCKET
        ))
        .status
        .code(),
        Some(0)
    );
    sled_put(&path, outside, b"user=alice");
    sled_put(&path, ALICE.as_bytes(), b"user=alice");
    redis_cli(&redis, &[b"SET", outside, b"user=alice"]);
    redis_cli(&redis, &[b"SET", ALICE.as_bytes(), b"user=alice"]);
    redis_cli(&redis, &[b"LPUSH", session.as_bytes(), b"x"]);
    for backend in [sled.as_str(), &redis.url()] {
        let out = reset("alice", backend);
        assert_eq!(out.status.code(), Some(4), "{backend}");
        assert_eq!(
            stderr(&out),
            "tollgate: key \"alice\" holds a state tollgate cannot read: state encoding version 117 is not supported (this build reads version 1)\n"
        );
        // `reset session:42` is about tollgate's own key for it, absent here.
        let out = reset("session:42", backend);
        if backend == sled {
            assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        } else {
            assert_eq!(out.status.code(), Some(4));
            assert_eq!(
                stderr(&out),
                "tollgate: key \"session:42\" holds a Redis list, not a tollgate state\n"
            );
        }
    }
    assert_eq!(
        sled_get(&path, outside).as_deref(),
        Some(b"user=alice".as_slice())
    );
    assert_eq!(
        sled_get(&path, ALICE.as_bytes()).as_deref(),
        Some(b"user=alice".as_slice())
    );
    assert_eq!(redis_cli(&redis, &[b"GET", outside]), "user=alice\n");
    assert_eq!(
        redis_cli(&redis, &[b"GET", ALICE.as_bytes()]),
        "user=alice\n"
    );
    assert_eq!(
        redis_cli(&redis, &[b"LRANGE", session.as_bytes(), b"0", b"-1"]),
        "x\n"
    );
}

/// Issue 16 item 1's clean-up: `purge` deletes every state of the policy in its
/// namespace, on Redis (where states written at explicit times never expire) and on
/// sled, and keeps anything else; memory explains that it forgets at exit.
#[test]
fn purge_deletes_the_policys_states_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let redis = common::Server::start();
    let path = dir.path().join("db");
    let sled = format!("sled:{}", path.display());
    for backend in [sled.as_str(), &redis.url()] {
        for key in ["a", "b", "c"] {
            let out = run_all(&with(
                &["check", key, "--backend", backend, "--now", "1000000"],
                &BUCKET,
            ));
            assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        }
        // Another policy's state, in its own namespace.
        let out = run_all(&with(
            &["check", "a", "--backend", backend, "--now", "1000000"],
            &[
                "--algorithm",
                "fixed-window",
                "--limit",
                "5",
                "--period",
                "1s",
            ],
        ));
        assert_eq!(out.status.code(), Some(0));
    }
    sled_put(&path, ALICE.as_bytes(), b"user=alice");
    sled_put(&path, b"session:42", b"user=alice");
    redis_cli(&redis, &[b"SET", ALICE.as_bytes(), b"user=alice"]);
    redis_cli(&redis, &[b"SET", b"session:42", b"user=alice"]);
    redis_cli(
        &redis,
        &[b"LPUSH", b"tollgate:token-bucket-10-5-1s:list", b"x"],
    );
    for backend in [sled.as_str(), &redis.url()] {
        let out = run_all(&with(&["purge", "--backend", backend], &BUCKET));
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        assert_eq!(
            stdout(&out),
            "token-bucket-10-5-1s: purged 3 states (keys tollgate:token-bucket-10-5-1s:*)\n"
        );
        let again = run_all(&with(&["purge", "--backend", backend], &BUCKET));
        assert!(
            stdout(&again).contains("purged 0 states"),
            "{}",
            stdout(&again)
        );
        // Purged keys are fresh; the other policy's state is still there.
        let out = run_all(&with(
            &["inspect", "b", "--backend", backend, "--now", "1000000"],
            &BUCKET,
        ));
        assert!(
            stdout(&out).contains("fresh (nothing stored)"),
            "{}",
            stdout(&out)
        );
        let out = run_all(&with(
            &["inspect", "a", "--backend", backend, "--now", "1000000"],
            &[
                "--algorithm",
                "fixed-window",
                "--limit",
                "5",
                "--period",
                "1s",
            ],
        ));
        assert!(
            stdout(&out).contains("window count  1 of 5"),
            "{}",
            stdout(&out)
        );
    }
    assert_eq!(
        sled_get(&path, ALICE.as_bytes()).as_deref(),
        Some(b"user=alice".as_slice())
    );
    assert_eq!(
        sled_get(&path, b"session:42").as_deref(),
        Some(b"user=alice".as_slice())
    );
    let mut con = redis.connection();
    let mut keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut con).unwrap();
    keys.sort();
    assert_eq!(
        keys,
        [
            "session:42",
            "tollgate:fixed-window-5-1s:a",
            "tollgate:token-bucket-10-5-1s:alice",
            "tollgate:token-bucket-10-5-1s:list"
        ]
    );
    let out = run_all(&with(&["purge"], &BUCKET));
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("nothing stored to inspect, reset or purge"));
    // Purging never creates a database.
    let missing = format!("sled:{}", dir.path().join("none").display());
    assert_eq!(
        run_all(&with(&["purge", "--backend", &missing], &BUCKET))
            .status
            .code(),
        Some(2)
    );
    assert!(!dir.path().join("none").exists());
}

/// The exit codes are one table: `--help`, the crate's doc and the README say the same.
#[test]
fn the_exit_code_table_is_the_same_everywhere() {
    let normal = |text: &str| {
        text.replace(['`', '*'], "")
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    let help = stdout(&tollgate(&["--help"]));
    let table = help
        .split("Exit codes: ")
        .nth(1)
        .unwrap()
        .trim()
        .trim_end_matches('.');
    assert!(table.contains("1 check denied, or a lock or lease held by another owner"));
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc: String = std::fs::read_to_string(manifest.join("src/main.rs"))
        .unwrap()
        .lines()
        .filter_map(|l| l.strip_prefix("//!"))
        .collect::<Vec<_>>()
        .join(" ");
    let readme = std::fs::read_to_string(manifest.join("../README.md")).unwrap();
    assert!(
        normal(&doc).contains(&format!("Exit codes: {table}")),
        "{doc}"
    );
    assert!(
        normal(&readme).contains(&format!("- Exit codes: {table}")),
        "the README's exit codes differ from --help: {table}"
    );
}

fn lock(args: &[&str]) -> Output {
    tollgate(&[&["lock"], args].concat())
}

/// Lock and lease commands on one backend: `tollgate lock COMMAND NAME --owner O
/// --backend B ...`, or with a policy, `tollgate lease COMMAND KEY --config C --policy P
/// --owner O --backend B ...`.
struct Leasing<'a> {
    backend: &'a str,
    /// `--config` and `--policy` for `lease`; none for `lock`.
    policy: Option<(&'a str, &'a str)>,
}

impl Leasing<'_> {
    fn run(&self, command: &str, key: &str, owner: &str, more: &[&str]) -> Output {
        let mut args = match self.policy {
            Some((config, policy)) => vec![
                "lease", command, key, "--config", config, "--policy", policy,
            ],
            None => vec!["lock", command, key],
        };
        args.extend(["--owner", owner, "--backend", self.backend]);
        tollgate(&[&args[..], more].concat())
    }

    /// The command at an explicit time.
    fn at(&self, command: &str, key: &str, owner: &str, now: u64, more: &[&str]) -> Output {
        self.run(
            command,
            key,
            owner,
            &[&["--now", &now.to_string()], more].concat(),
        )
    }
}

/// The token printed by an acquire.
fn token(out: &Output) -> u64 {
    stdout(out)
        .split_whitespace()
        .find_map(|f| f.strip_prefix("token="))
        .unwrap()
        .parse()
        .unwrap()
}

/// A lock at explicit times, on sled and on Redis with the same output and exit codes:
/// acquire prints its token and expiry; another owner gets exit 1; the holder re-enters;
/// release and renew only by the holder (else exit 1); the token grows with every
/// acquire/release cycle; `inspect` shows the holder.
#[test]
fn a_lock_is_exclusive_reentrant_and_its_token_grows_on_sled_and_redis() {
    on_sled_and_redis(|backend, _| a_lock_is_exclusive_reentrant_and_its_token_grows(backend));
}

fn a_lock_is_exclusive_reentrant_and_its_token_grows(backend: &str) {
    let l = Leasing {
        backend,
        policy: None,
    };
    let b = ["--backend", backend];
    let out = l.at("acquire", "nightly", "a", 1_000_000, &["--ttl", "30s"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "acquired token=1000000 expires_at_us=31000000 holds=1\n"
    );
    let out = l.at("acquire", "nightly", "b", 2_000_000, &["--ttl", "30s"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(stdout(&out), "");
    assert_eq!(
        stderr(&out),
        "tollgate: lock \"nightly\" is held by another owner; the earliest expires in 29 s unless renewed\n"
    );
    for command in ["release", "renew"] {
        let ttl: &[&str] = if command == "renew" {
            &["--ttl", "1m"]
        } else {
            &[]
        };
        let out = l.at(command, "nightly", "b", 2_000_000, ttl);
        assert_eq!(out.status.code(), Some(1), "{command}");
        assert_eq!(
            stderr(&out),
            "tollgate: owner \"b\" holds no lease on lock \"nightly\" (never acquired, released, or expired)\n"
        );
    }
    let out = l.at("acquire", "nightly", "a", 3_000_000, &["--ttl", "30s"]);
    assert_eq!(
        stdout(&out),
        "acquired token=1000000 expires_at_us=33000000 holds=2\n"
    );
    let out = l.at("renew", "nightly", "a", 4_000_000, &["--ttl", "1m"]);
    assert_eq!(
        stdout(&out),
        "renewed token=1000000 expires_at_us=64000000 holds=2\n"
    );
    let inspect = lock(&[&["inspect", "nightly", "--now", "4000000"], &b[..]].concat());
    assert_eq!(
        stdout(&inspect),
        concat!(
            "key         nightly\n",
            "stored as   tollgate:lock:nightly\n",
            "algorithm   lock\n",
            "held        1 of 1\n",
            "lease       owner \"a\", token 1000000, holds 2, expires in 1 min (at 64000000 µs)\n",
            "last token  1000000\n",
        )
        .to_owned()
            + "encoded     "
            + &stdout(&inspect)
                ["encoded     ".len() + stdout(&inspect).find("encoded     ").unwrap()..]
    );
    let json = stdout(&lock(
        &[
            &["inspect", "nightly", "--now", "4000000", "--json"],
            &b[..],
        ]
        .concat(),
    ));
    assert!(json.starts_with(r#"{"key":"nightly","stored_key":"tollgate:lock:nightly","algorithm":"lock","stored":true,"now_us":4000000,"limit":1,"held":1,"leases":[{"owner":"a","token":1000000,"expires_at_us":64000000,"holds":2}],"last_token":1000000,"encoded":"01"#), "{json}");
    let release = |owner: &str, t: u64| l.at("release", "nightly", owner, t, &[]);
    assert_eq!(
        stdout(&release("a", 5_000_000)),
        "released token=1000000 holds=1\n"
    );
    assert_eq!(
        stdout(&release("a", 5_000_000)),
        "released token=1000000 holds=0\n"
    );
    assert_eq!(release("a", 5_000_000).status.code(), Some(1));
    // Acquire/release cycles, by turns of owners, even within one µs: tokens only grow.
    let mut last = 1_000_000;
    for (i, owner) in ["b", "a", "b", "c"].iter().enumerate() {
        let t = 5_000_000 + (i as u64 / 2);
        let token = token(&l.at("acquire", "nightly", owner, t, &["--ttl", "1s"]));
        assert!(token > last, "{token} after {last}");
        last = token;
        assert_eq!(release(owner, t).status.code(), Some(0));
    }
    // Nobody holds it; the record keeps the last token while the clock has not passed it
    // (tokens ran ahead of the clock within one µs above).
    let out = lock(&[&["inspect", "nightly", "--now", "9000000"], &b[..]].concat());
    assert!(
        stdout(&out).contains("held        0 of 1\nlast token  5000003\n"),
        "{}",
        stdout(&out)
    );
    // Released once the clock is past it: fresh again. Redis deletes the record (its
    // script is atomic); sled keeps it as its last token, so that a compare-and-swap
    // that read the key as absent earlier cannot grant a smaller token after a deletion.
    let out = l.at("acquire", "nightly", "a", 9_000_000, &["--ttl", "1s"]);
    assert_eq!(
        stdout(&out),
        "acquired token=9000000 expires_at_us=10000000 holds=1\n"
    );
    assert_eq!(release("a", 9_000_001).status.code(), Some(0));
    let out = lock(&[&["inspect", "nightly", "--now", "9000001"], &b[..]].concat());
    let fresh = if backend.starts_with("sled:") {
        "held        0 of 1\nlast token  9000000\n"
    } else {
        "held       0 of 1\nstate      fresh (nothing stored)\n"
    };
    assert!(stdout(&out).contains(fresh), "{}", stdout(&out));
}

#[test]
fn processes_contend_for_one_lock_on_sled_and_redis() {
    on_sled_and_redis(|backend, _| processes_contend_for_one_lock(backend));
}

/// Two processes contend for one lock on the real clock (Redis: the server's): the second
/// gets exit 1, then 0 once the first released, with a larger token, cycle after cycle;
/// eight started at once on one store: exactly one gets the lock, the others exit 1
/// (none fails on a sled database being in use).
fn processes_contend_for_one_lock(backend: &str) {
    let l = Leasing {
        backend,
        policy: None,
    };
    let acquire = |owner: &str| l.run("acquire", "job", owner, &["--ttl", "1m"]);
    let mut last = 0;
    for _cycle in 0..3 {
        let first = acquire("first");
        assert_eq!(first.status.code(), Some(0), "{}", stderr(&first));
        assert!(stdout(&first).starts_with("acquired token="));
        let second = acquire("second");
        assert_eq!(second.status.code(), Some(1), "{}", stderr(&second));
        let out = l.run("release", "job", "first", &[]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let second = acquire("second");
        assert_eq!(second.status.code(), Some(0), "{}", stderr(&second));
        assert!(token(&second) > token(&first));
        assert!(token(&first) > last, "{} after {last}", token(&first));
        last = token(&second);
        let out = l.run("release", "job", "second", &[]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    }
    let children: Vec<_> = (0..8)
        .map(|i| {
            Command::new(env!("CARGO_BIN_EXE_tollgate"))
                .args([
                    "lock",
                    "acquire",
                    "race",
                    "--owner",
                    &format!("p{i}"),
                    "--ttl",
                    "1m",
                    "--backend",
                    backend,
                ])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let codes: Vec<Option<i32>> = children
        .into_iter()
        .map(|c| {
            let out = c.wait_with_output().unwrap();
            assert!(matches!(out.status.code(), Some(0 | 1)), "{}", stderr(&out));
            out.status.code()
        })
        .collect();
    assert_eq!(
        codes.iter().filter(|&&c| c == Some(0)).count(),
        1,
        "{codes:?}"
    );
}

#[test]
fn waiting_for_a_lock_is_bounded_on_sled_and_redis() {
    on_sled_and_redis(|backend, _| waiting_for_a_lock_is_bounded(backend));
}

/// `--wait` is bounded: a lock held for a minute is still refused (exit 1) after the
/// wait; a waiter gets the lock soon after the holder releases it, and when its holder's
/// lease expires.
fn waiting_for_a_lock_is_bounded(backend: &str) {
    let l = Leasing {
        backend,
        policy: None,
    };
    let acquire = |owner: &str, ttl: &str, wait: &str| {
        let mut args = vec!["--ttl", ttl];
        if !wait.is_empty() {
            args.extend(["--wait", wait]);
        }
        l.run("acquire", "job", owner, &args)
    };
    assert_eq!(acquire("holder", "1m", "").status.code(), Some(0));
    let start = Instant::now();
    let out = acquire("waiter", "1m", "400ms");
    let waited = start.elapsed();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("is held by another owner (after waiting 400 ms)"),
        "{}",
        stderr(&out)
    );
    assert!(
        waited >= Duration::from_millis(400) && waited < Duration::from_secs(3),
        "{waited:?}"
    );
    // Released while a waiter waits: the waiter gets it within its polling interval.
    let waiter = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args([
            "lock",
            "acquire",
            "job",
            "--owner",
            "waiter",
            "--ttl",
            "1m",
            "--wait",
            "20s",
            "--backend",
            backend,
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let out = l.run("release", "job", "holder", &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let released = Instant::now();
    let out = waiter.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        released.elapsed() < Duration::from_secs(3),
        "{:?}",
        released.elapsed()
    );
    // A holder that never releases: its lease expires, and the waiter gets it then.
    let out = l.run("release", "job", "waiter", &[]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(acquire("crashed", "700ms", "").status.code(), Some(0));
    let start = Instant::now();
    let out = acquire("next", "1m", "10s");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        start.elapsed() >= Duration::from_millis(500),
        "{:?}",
        start.elapsed()
    );
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn leases_of_a_concurrency_policy_on_sled_and_redis() {
    on_sled_and_redis(|backend, _| leases_of_a_concurrency_policy(backend));
}

/// `lease` for a concurrency policy (`report-workers`: 3 in flight, lease 30s): three
/// owners in, the fourth refused until one leaves; `inspect` shows the holders; the
/// commands refuse rate policies, and rate commands refuse it; memory refuses, and an
/// unreachable Redis is exit 4.
fn leases_of_a_concurrency_policy(backend: &str) {
    let config = examples();
    let l = Leasing {
        backend,
        policy: Some((&config, "report-workers")),
    };
    let lease = |command: &str, owner: &str, t: u64| l.at(command, "export", owner, t, &[]);
    for (i, owner) in ["w1", "w2", "w3"].iter().enumerate() {
        let t = 1_000_000 * (i as u64 + 1);
        let out = lease("acquire", owner, t);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        assert_eq!(
            stdout(&out),
            format!(
                "acquired token={t} expires_at_us={} holds=1\n",
                t + 30_000_000
            )
        );
    }
    let out = lease("acquire", "w4", 4_000_000);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out),
        "tollgate: all 3 leases of key \"export\" of policy \"report-workers\" are held; the earliest expires in 27 s unless renewed\n"
    );
    let inspect = |args: &[&str]| {
        stdout(&tollgate(
            &[
                &[
                    "inspect",
                    "export",
                    "--config",
                    &config,
                    "--policy",
                    "report-workers",
                    "--backend",
                    backend,
                ],
                args,
            ]
            .concat(),
        ))
    };
    let text = inspect(&["--now", "4000000"]);
    assert!(
        text.starts_with(concat!(
            "key         export\n",
            "stored as   tollgate:report-workers:export\n",
            "algorithm   concurrency\n",
            "held        3 of 3\n",
            "lease       owner \"w1\", token 1000000, holds 1, expires in 27 s (at 31000000 µs)\n",
            "lease       owner \"w2\", token 2000000, holds 1, expires in 28 s (at 32000000 µs)\n",
            "lease       owner \"w3\", token 3000000, holds 1, expires in 29 s (at 33000000 µs)\n",
            "last token  3000000\n",
        )),
        "{text}"
    );
    // Past w1's expiry it is no longer shown as held.
    let json = inspect(&["--now", "31000000", "--json"]);
    assert!(
        json.contains(r#""held":2,"leases":[{"owner":"w2""#),
        "{json}"
    );
    assert_eq!(lease("release", "w2", 5_000_000).status.code(), Some(0));
    assert_eq!(lease("release", "w2", 5_000_000).status.code(), Some(1));
    assert_eq!(
        stdout(&lease("acquire", "w4", 5_000_000)),
        "acquired token=5000000 expires_at_us=35000000 holds=1\n"
    );
    assert_eq!(
        stdout(&lease("renew", "w1", 6_000_000)),
        "renewed token=1000000 expires_at_us=36000000 holds=1\n"
    );
    // A crashed holder's slot comes back after its lease: w3's at 33 s.
    assert_eq!(lease("acquire", "w5", 32_999_999).status.code(), Some(1));
    assert_eq!(lease("acquire", "w5", 33_000_000).status.code(), Some(0));
    // Rate commands refuse a concurrency policy, lease commands a rate policy.
    let out = tollgate(&[
        "check",
        "export",
        "--config",
        &config,
        "--policy",
        "report-workers",
        "--backend",
        backend,
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("is a concurrency limit, not a rate"),
        "{}",
        stderr(&out)
    );
    let daily = Leasing {
        backend,
        policy: Some((&config, "daily")),
    };
    let out = daily.run("acquire", "export", "w", &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("is a rate limit, not a concurrency limit"),
        "{}",
        stderr(&out)
    );
    let unreachable = format!("redis://127.0.0.1:{}/", common::free_port());
    for (backend, code, wanted) in [
        ("memory", 2, "the memory backend forgets leases"),
        (unreachable.as_str(), 4, "redis is unavailable"),
    ] {
        let l = Leasing {
            backend,
            policy: None,
        };
        let out = l.run("acquire", "x", "a", &["--ttl", "1s"]);
        assert_eq!(out.status.code(), Some(code), "{}", stderr(&out));
        assert!(stderr(&out).contains(wanted), "{}", stderr(&out));
    }
}

/// Runs `test` on a new sled database, then on a new Redis server: one test body, so
/// both backends must give the same output and exit codes.
fn on_sled_and_redis(test: impl Fn(&str, &Raw)) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    test(&format!("sled:{}", path.display()), &Raw::Sled(&path));
    let redis = common::Server::start();
    test(&redis.url(), &Raw::Redis(&redis));
}

/// Where a test puts bytes another program wrote, and reads them back.
enum Raw<'a> {
    Sled(&'a Path),
    Redis(&'a common::Server),
}

impl Raw<'_> {
    fn put(&self, key: &[u8], value: &[u8]) {
        match self {
            Self::Sled(path) => sled_put(path, key, value),
            Self::Redis(server) => redis::cmd("SET")
                .arg(key)
                .arg(value)
                .exec(&mut server.connection())
                .unwrap(),
        }
    }

    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        match self {
            Self::Sled(path) => sled_get(path, key),
            Self::Redis(server) => redis::cmd("GET")
                .arg(key)
                .query(&mut server.connection())
                .unwrap(),
        }
    }

    /// Whether nothing at all is stored (sled: not even a database).
    fn is_empty(&self) -> bool {
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

#[test]
fn bad_lease_input_and_foreign_states_change_nothing_on_sled_and_redis() {
    on_sled_and_redis(bad_lease_input_and_foreign_states_change_nothing);
}

/// Bad lease input is exit 2 before anything is stored; another state under a lock's key
/// is exit 4 with the library's message, and it is left as it is.
fn bad_lease_input_and_foreign_states_change_nothing(backend: &str, raw: &Raw) {
    let dir = tempfile::tempdir().unwrap();
    for (args, wanted) in [
        (
            vec!["--owner", "", "--ttl", "1s"],
            "'--owner <OWNER>': must be 1 to 128 bytes, got 0",
        ),
        (
            vec!["--owner", &"x".repeat(129), "--ttl", "1s"],
            "must be 1 to 128 bytes, got 129",
        ),
        (
            vec!["--owner", "a", "--ttl", "0s"],
            "--ttl must be between 1 µs and 366 days, got 0 s",
        ),
        (
            vec!["--owner", "a", "--ttl", "400d"],
            "--ttl must be between 1 µs and 366 days, got 400 days",
        ),
        (
            vec!["--owner", "a", "--ttl", "1s", "--now", "5", "--wait", "1s"],
            "--wait retries on the clock, so it cannot be used with --now",
        ),
    ] {
        let out = lock(&[&["acquire", "x", "--backend", backend][..], &args[..]].concat());
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(stderr(&out).contains(wanted), "{args:?}: {}", stderr(&out));
    }
    assert!(raw.is_empty());
    let bad = dir.path().join("bad.toml");
    let bad_policy = Leasing {
        backend,
        policy: Some((bad.to_str().unwrap(), "p")),
    };
    std::fs::write(
        &bad,
        "[policies.p]\nalgorithm = \"concurrency\"\nlimit = 0\nlease = \"1s\"\nperiod = \"1s\"\n",
    )
    .unwrap();
    let out = bad_policy.run("acquire", "k", "a", &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out)
            .ends_with("policy \"p\": concurrency takes `limit` and `lease`, not `period`\n"),
        "{}",
        stderr(&out)
    );
    std::fs::write(
        &bad,
        "[policies.p]\nalgorithm = \"concurrency\"\nlimit = 0\nlease = \"1s\"\n",
    )
    .unwrap();
    let out = bad_policy.run("acquire", "k", "a", &[]);
    assert!(
        stderr(&out)
            .ends_with("bad.toml:3:9: policy \"p\": `limit` must be between 1 and 1024, got 0\n"),
        "{}",
        stderr(&out)
    );
    // A rate state and garbage where locks live: refused by every lease command, kept.
    let l = Leasing {
        backend,
        policy: None,
    };
    assert_eq!(
        l.run("acquire", "y", "a", &["--ttl", "1s"]).status.code(),
        Some(0)
    );
    raw.put(b"tollgate:lock:x", GARBAGE);
    for args in [
        vec!["acquire", "x", "--owner", "a", "--ttl", "1s"],
        vec!["release", "x", "--owner", "a"],
        vec!["renew", "x", "--owner", "a", "--ttl", "1s"],
        vec!["inspect", "x"],
    ] {
        let out = lock(&[&args[..], &["--backend", backend]].concat());
        assert_eq!(out.status.code(), Some(4), "{args:?}");
        assert_eq!(
            stderr(&out),
            "tollgate: key \"x\" holds a state tollgate cannot read: state is a token bucket's, expected a lease table's\n",
            "{args:?}"
        );
    }
    assert_eq!(raw.get(b"tollgate:lock:x").as_deref(), Some(GARBAGE));
}

/// Issue 17 item 6: `rediss://` with `--redis-ca` works for every command, and decides
/// byte for byte as plain TCP; a server whose certificate the CA did not sign (another
/// CA, or the system's roots) is exit 6; a CA file that is unreadable or no PEM, or a
/// `--redis-ca` for a backend without TLS, is exit 2 before anything is sent.
#[test]
fn redis_over_tls_decides_as_over_tcp_and_refuses_an_untrusted_server() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::Server::start_tls();
    let (_, certs) = server.tls.as_ref().unwrap();
    let ca = certs.file("ca.crt");
    let mut trace = String::from("t_us,key,cost\n");
    let mut t = 1_700_000_000_000_000u64;
    for i in 0..500u64 {
        t += (i * 7919) % 90_000;
        trace += &format!("{t},user-{},{}\n", i % 5, 1 + i % 3);
    }
    let trace = write(dir.path(), "trace.csv", &trace);
    let policy = ["--config", &examples(), "--policy", "api", "--app", "web"];
    let replay = |backend: &str, more: &[&str]| {
        let out = tollgate(
            &[
                &["replay", "--trace", &trace, "--backend", backend],
                &policy[..],
                more,
            ]
            .concat(),
        );
        assert!(out.status.success(), "{backend}: {}", stderr(&out));
        out.stdout
    };
    // One database each, so both start fresh.
    let tcp = replay(&format!("{}1", server.url()), &[]);
    let tls = format!("{}2", server.tls_url());
    assert_eq!(tcp.iter().filter(|&&b| b == b'\n').count(), 500);
    assert!(
        tcp == replay(&tls, &["--redis-ca", &ca]),
        "TCP and TLS differ"
    );
    let with_ca = ["--backend", tls.as_str(), "--redis-ca", ca.as_str()];
    let out = tollgate(&[&["check", "carol", "--now", "5"], &policy[..], &with_ca[..]].concat());
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).starts_with(r#"{"t_us":5,"key":"carol","cost":1,"allowed":true"#));
    let out = tollgate(
        &[
            &["inspect", "carol", "--now", "5"],
            &policy[..],
            &with_ca[..],
        ]
        .concat(),
    );
    assert!(
        stdout(&out).contains("tokens available  9 of 10\n"),
        "{}",
        stdout(&out)
    );
    let out = tollgate(&[&["purge"], &policy[..], &with_ca[..]].concat());
    assert!(
        stdout(&out).starts_with("api: purged 6 states"),
        "{}",
        stdout(&out)
    );
    let out = lock(
        &[
            &["acquire", "tls", "--owner", "a", "--ttl", "1m"],
            &with_ca[..],
        ]
        .concat(),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = lock(&[&["inspect", "tls"], &with_ca[..]].concat());
    assert!(
        stdout(&out).contains("held        1 of 1\nlease       owner \"a\""),
        "{}",
        stdout(&out)
    );
    let out = tollgate(
        &[
            &[
                "simulate",
                "--traffic",
                "steady:rate=10",
                "--duration",
                "1s",
            ],
            &policy[..],
            &with_ca[..],
        ]
        .concat(),
    );
    let port = server.tls.as_ref().unwrap().0;
    assert!(
        stdout(&out).lines().any(|line| line.starts_with("backend ")
            && line.ends_with(&format!("  rediss://127.0.0.1:{port}"))),
        "{}",
        stdout(&out)
    );
    // Untrusted: a certificate signed by another CA, or checked against the system's roots.
    let other = common::Certs::generate(&dir.path().join("other"));
    for ca in [vec!["--redis-ca", &other.file("ca.crt")], vec![]] {
        let check = [&["check", "carol"][..], &policy[..]].concat();
        for command in [
            &check[..],
            &["lock", "acquire", "tls", "--owner", "b", "--ttl", "1s"],
        ] {
            let out = tollgate(&[command, &["--backend", &tls], &ca[..]].concat());
            assert_eq!(
                out.status.code(),
                Some(6),
                "{ca:?} {command:?}: {}",
                stderr(&out)
            );
            // Another CA of the same name: BadSignature; the system's roots: UnknownIssuer.
            assert!(
                stderr(&out).starts_with("tollgate: TLS: invalid peer certificate: "),
                "{ca:?}: {}",
                stderr(&out)
            );
        }
    }
    // Bad CA files and CA flags for backends without TLS: exit 2, naming the flag.
    let not_pem = write(dir.path(), "not.pem", "not a certificate\n");
    let missing = dir.path().join("missing.pem").display().to_string();
    let sled = format!("sled:{}", dir.path().join("db").display());
    for (backend, file, wanted) in [
        (tls.as_str(), not_pem.as_str(), format!("--redis-ca {not_pem}: TLS: the CA file holds no PEM certificate")),
        (tls.as_str(), missing.as_str(), format!("--redis-ca {missing}: cannot read it")),
        (&server.url(), ca.as_str(), "--redis-ca is for a rediss:// backend (TLS); this --backend is a redis:// URL, which has no TLS".to_owned()),
        ("memory", ca.as_str(), "--redis-ca is for a rediss:// backend (TLS); this --backend is not Redis".to_owned()),
        (&sled, ca.as_str(), "--redis-ca is for a rediss:// backend (TLS); this --backend is not Redis".to_owned()),
    ] {
        let out = tollgate(&[&["check", "carol"], &policy[..], &["--backend", backend, "--redis-ca", file]].concat());
        assert_eq!(out.status.code(), Some(2), "{backend} {file}: {}", stderr(&out));
        assert!(stderr(&out).starts_with(&format!("tollgate: {wanted}")), "{}", stderr(&out));
    }
    assert!(!dir.path().join("db").exists());
}
