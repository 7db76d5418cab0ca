//! The `sluicegate` binary as a whole, run as a user runs it: flags and policy errors,
//! help, exit codes, a full disk, and Redis over TLS.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::{
    self, assert_contains, assert_exit, bin, bucket, examples, lock, run_line, sluicegate, stderr,
    stdout, temp_file, trace, with, write, BUCKET,
};

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
        let out = run_line(&format!("check k --config {config} --policy a --now 0"));
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
        let out = run_line(&format!(
            "replay --trace {trace} --algorithm fixed-window --limit 1 --period 1s"
        ));
        assert_exit(&out, 2);
        assert_contains(&stderr(&out), message);
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
        let out = run_line(&args);
        assert_eq!(out.status.code(), Some(2), "{args}");
        assert!(!stderr(&out).trim().is_empty(), "{args}");
    }
}

#[test]
fn a_policy_refuses_apps_it_does_not_serve() {
    let check = |app: &str| {
        run_line(&format!(
            "check k --config {} --policy api --app {app} --now 0",
            examples()
        ))
    };
    assert_exit(&check("web"), 0);
    let out = check("batch");
    assert_exit(&out, 3);
    assert!(stderr(&out).contains("no such policy for this app"));
}

#[test]
fn an_unreachable_redis_fails_with_exit_code_4_within_the_timeout() {
    let backend = format!("redis://127.0.0.1:{}/", common::free_port());
    let start = Instant::now();
    let out = run_line(&format!(
        "check k --algorithm token-bucket --capacity 1 --rate 1 --period 1s \
         --backend {backend}"
    ));
    assert_exit(&out, 4);
    assert_contains(&stderr(&out), "unavailable");
    assert!(start.elapsed() < Duration::from_secs(5));
}

#[test]
fn a_policy_beyond_the_lua_range_is_refused_on_redis() {
    let redis = common::Server::start();
    // The core's range runs on the scripts: ten million a month.
    let out = run_line(&format!(
        "check k --algorithm fixed-window --limit 10000000 --period 30d --backend {}",
        redis.url()
    ));
    assert_exit(&out, 0);
    // A sliding log beyond what a script may keep is refused, naming the alternatives.
    let out = run_line(&format!(
        "check k --algorithm sliding-log --limit 2001 --period 1s --backend {}",
        redis.url()
    ));
    assert_exit(&out, 2);
    assert_contains(&stderr(&out), "cannot run on Redis");
    assert_contains(&stderr(&out), "sliding counter");
    // The core's last time runs on the scripts; a sliding log's stops at 2^52, its
    // error naming the alternatives.
    let url = redis.url();
    let out = bucket(&[
        "check",
        "k",
        "--backend",
        &url,
        "--now",
        "4611686018427387904",
    ]);
    assert_exit(&out, 0);
    let out = run_line(&format!(
            "check k --algorithm sliding-log --limit 5 --period 1s --backend {url} --now 4503599627370497"
        ));
    assert_exit(&out, 2);
    assert_contains(
        &stderr(&out),
        "now is 4503599627370497, beyond 4503599627370496",
    );
    assert_contains(&stderr(&out), "sliding counter");
}

#[test]
fn every_command_has_help() {
    for command in [
        "simulate", "replay", "check", "peek", "reset", "inspect", "purge", "lock", "lease",
    ] {
        let out = sluicegate([command, "--help"]);
        assert_exit(&out, 0);
        assert!(stdout(&out).contains("Usage: sluicegate"), "{command}");
    }
    for command in ["acquire", "release", "renew"] {
        for group in ["lock", "lease"] {
            let out = sluicegate([group, command, "--help"]);
            assert!(
                stdout(&out).contains("--owner <OWNER>"),
                "{group} {command}"
            );
        }
    }
    let out = sluicegate(["--help"]);
    assert!(stdout(&out).contains("Exit codes"));
}

#[test]
fn every_command_reports_a_full_disk_the_same_way() {
    let (dir, trace) = temp_file("t.csv", "t_us,key,cost\n0,a,1\n");
    let sled = format!("sled:{}", dir.path().join("db").display());
    let chart = dir.path().join("c.svg");
    let chart = chart.to_str().unwrap();
    let rate = BUCKET.join(" ");
    let leases = format!("--config {} --policy report-workers", examples());
    let simulate = format!("simulate --traffic steady:rate=5 --duration 1s {rate}");
    let commands = [
        format!("check a --backend {sled} --now 0 {rate}"),
        format!("peek a --backend {sled} --now 0 {rate}"),
        format!("inspect a --backend {sled} --now 0 {rate}"),
        format!("inspect a --json --backend {sled} {rate}"),
        format!("reset a --backend {sled} {rate}"),
        format!("purge --backend {sled} {rate}"),
        format!("lock acquire l --owner o --ttl 1s --backend {sled}"),
        format!("lock renew l --owner o --ttl 1s --backend {sled}"),
        format!("lock release l --owner o --backend {sled}"),
        format!("lock inspect l --backend {sled}"),
        format!("lease acquire k --owner o --backend {sled} {leases}"),
        format!("inspect k --backend {sled} {leases}"),
        format!("replay --trace {trace} {rate}"),
        simulate.clone(),
        format!("{simulate} --chart /dev/full"),
        format!("{simulate} --chart {chart}"),
        "--help".to_owned(),
        "--version".to_owned(),
        "check --help".to_owned(),
    ];
    for command in &commands {
        let args: Vec<&str> = command.split_whitespace().collect();
        let out = bin()
            .args(&args)
            .stdout(std::fs::File::create("/dev/full").unwrap())
            .output()
            .unwrap();
        let message = stderr(&out);
        assert_eq!(out.status.code(), Some(5), "{args:?}: {message}");
        assert!(
            message.starts_with("sluicegate: cannot write") && message.contains("No space left"),
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
        let out = sluicegate(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let message = stderr(&out);
        assert!(message.contains(wanted), "{args:?}: {message}");
        assert!(!message.contains("tip:"), "{message}");
    }
    // The top of the range itself is accepted.
    let out = bucket(&["check", "k", "--now", "4611686018427387904"]);
    assert_exit(&out, 0);
}

#[test]
fn everything_missing_from_a_policy_is_reported_at_once() {
    let config = examples();
    for (args, wanted) in [
        (
            "check k --algorithm token-bucket".to_owned(),
            "sluicegate: token-bucket needs --capacity, --rate and --period\n",
        ),
        (
            "check k --algorithm fixed-window --capacity 3".to_owned(),
            "sluicegate: fixed-window needs --limit and --period; fixed-window takes --limit and --period, not --capacity\n",
        ),
        (
            "check alice --policy api".to_owned(),
            "sluicegate: --policy api needs --config FILE, the policy file that defines it\n",
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
            "sluicegate: no policy given: use --config FILE --policy NAME, or --algorithm with --limit N --period D",
        ),
    ] {
        let out = run_line(&args);
        assert_eq!(out.status.code(), Some(2), "{args}");
        assert!(stderr(&out).contains(wanted), "{args}: {}", stderr(&out));
    }
}

/// The exit codes are one table: `--help`, the crate's doc and the guide say the same.
#[test]
fn the_exit_code_table_is_the_same_everywhere() {
    let normal = |text: &str| {
        text.replace(['`', '*'], "")
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    let help = stdout(&sluicegate(["--help"]));
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
    let guide = std::fs::read_to_string(manifest.join("../docs/cli.md")).unwrap();
    assert!(
        normal(&doc).contains(&format!("Exit codes: {table}")),
        "{doc}"
    );
    assert!(
        normal(&guide).contains(&format!("- Exit codes: {table}")),
        "the guide's exit codes differ from --help: {table}"
    );
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
    let trace = write(dir.path(), "trace.csv", &trace(500, 5));
    let policy = ["--config", &examples(), "--policy", "api", "--app", "web"];
    let replay = |backend: &str, more: &[&str]| {
        let out = sluicegate(
            [
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
    let out = sluicegate([&["check", "carol", "--now", "5"], &policy[..], &with_ca[..]].concat());
    assert_exit(&out, 0);
    assert!(stdout(&out).starts_with(r#"{"t_us":5,"key":"carol","cost":1,"allowed":true"#));
    let out = sluicegate(
        [
            &["inspect", "carol", "--now", "5"],
            &policy[..],
            &with_ca[..],
        ]
        .concat(),
    );
    assert_contains(&stdout(&out), "tokens available  9 of 10\n");
    let out = sluicegate([&["purge"], &policy[..], &with_ca[..]].concat());
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
    assert_exit(&out, 0);
    let out = lock(&[&["inspect", "tls"], &with_ca[..]].concat());
    assert_contains(
        &stdout(&out),
        "held        1 (at most 1024 shared)\nlease       owner \"a\", exclusive",
    );
    let out = sluicegate(
        [
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
            let out = sluicegate([command, &["--backend", &tls], &ca[..]].concat());
            assert_eq!(
                out.status.code(),
                Some(6),
                "{ca:?} {command:?}: {}",
                stderr(&out)
            );
            // Another CA of the same name: BadSignature; the system's roots: UnknownIssuer.
            assert!(
                stderr(&out).starts_with("sluicegate: TLS: invalid peer certificate: "),
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
        let out = sluicegate([&["check", "carol"], &policy[..], &["--backend", backend, "--redis-ca", file]].concat());
        assert_eq!(out.status.code(), Some(2), "{backend} {file}: {}", stderr(&out));
        assert!(stderr(&out).starts_with(&format!("sluicegate: {wanted}")), "{}", stderr(&out));
    }
    assert!(!dir.path().join("db").exists());
}
