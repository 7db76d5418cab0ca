//! `sluicegate replay`: traces decided alike on every backend, their errors, standard
//! input, the memory backend's bound, and a reader that stops early.

use crate::common::{
    self, assert_contains, assert_exit, bucket, examples, run_line, sluicegate,
    sluicegate_with_stdin, spawn, stderr, stdout, temp_file, trace, with, write, BUCKET,
};

/// Runs `command` and returns what it printed, failing with its errors unless it succeeded.
fn replayed(command: &str) -> String {
    let out = run_line(command);
    assert!(out.status.success(), "{command}: {}", stderr(&out));
    stdout(&out)
}

#[test]
fn replay_prints_exact_json_lines() {
    let (_dir, trace) = temp_file(
        "t.csv",
        "t_us,key,cost\n0,alice,1\n0,alice,1\n0,alice,1\n250000,\"bob, jr\",3\n500000,alice,1\n",
    );
    let out = run_line(&format!(
        "replay --trace {trace} --algorithm token-bucket --capacity 2 --rate 2 --period 1s"
    ));
    assert_exit(&out, 0);
    assert_eq!(
        stdout(&out),
        concat!(
            r#"{"t_us":0,"key":"alice","cost":1,"allowed":true,"limit":2,"remaining":1,"retry_after_us":0,"reset_after_us":500000,"delay_us":0}"#,
            "\n",
            r#"{"t_us":0,"key":"alice","cost":1,"allowed":true,"limit":2,"remaining":0,"retry_after_us":0,"reset_after_us":1000000,"delay_us":0}"#,
            "\n",
            r#"{"t_us":0,"key":"alice","cost":1,"allowed":false,"limit":2,"remaining":0,"retry_after_us":500000,"reset_after_us":1000000,"delay_us":0}"#,
            "\n",
            r#"{"t_us":250000,"key":"bob, jr","cost":3,"allowed":false,"limit":2,"remaining":2,"retry_after_us":null,"reset_after_us":0,"delay_us":0}"#,
            "\n",
            r#"{"t_us":500000,"key":"alice","cost":1,"allowed":true,"limit":2,"remaining":0,"retry_after_us":0,"reset_after_us":1000000,"delay_us":0}"#,
            "\n",
        )
    );
}

#[test]
fn replay_is_byte_identical_on_memory_sled_and_redis() {
    let dir = tempfile::tempdir().unwrap();
    let redis = common::Server::start();
    let trace = write(dir.path(), "trace.csv", &trace(2000, 7));
    for (db, policy) in ["api", "login", "reports", "daily"].into_iter().enumerate() {
        let run = |backend: &str| {
            replayed(&format!(
                "replay --trace {trace} --config {} --policy {policy} --app web --backend \
                 {backend}",
                examples()
            ))
        };
        let sled = format!("sled:{}", dir.path().join(policy).display());
        // One database per policy: the trace's keys are the same in each.
        let redis = format!("{}{db}", redis.url());
        let memory = run("memory");
        assert_eq!(memory.matches('\n').count(), 2000);
        assert!(memory == run(&sled), "{policy}: memory and sled differ");
        assert!(memory == run(&redis), "{policy}: memory and Redis differ");
    }
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
        let out = bucket(&[
            "replay",
            "--trace",
            &trace,
            "--backend",
            backend,
            "--durability",
            durability,
        ]);
        assert_exit(&out, 0);
        out.stdout
    };
    let memory = run("memory", "every-decision");
    for durability in ["every-decision", "background"] {
        let sled = format!("sled:{}", dir.path().join(durability).display());
        assert!(memory == run(&sled, durability), "{durability}");
    }
    let out = sluicegate(["replay", "--trace", &trace, "--durability", "sometimes"]);
    assert_exit(&out, 2);
}

#[test]
fn traces_trim_keys_and_read_standard_input() {
    let trace = "t_us,key,cost\n 0 , alice ,1\n0,alice, 1\n\n";
    let out = sluicegate_with_stdin(with(&["replay", "--trace", "-"], &BUCKET), trace);
    assert_exit(&out, 0);
    let lines: Vec<&str> = std::str::from_utf8(&out.stdout).unwrap().lines().collect();
    assert_eq!(lines.len(), 2);
    assert!(lines[0].contains(r#""key":"alice","cost":1,"allowed":true,"limit":10,"remaining":9"#));
    assert!(lines[1].contains(r#""key":"alice","cost":1,"allowed":true,"limit":10,"remaining":8"#));
    let out = sluicegate_with_stdin(
        with(&["replay", "--trace", "-"], &BUCKET),
        "t_us,key,cost\n0,a,1\n1,a\n",
    );
    assert_exit(&out, 2);
    assert_eq!(
        stderr(&out),
        "sluicegate: stdin:3: expected 3 fields (t_us,key,cost), found 2\n"
    );
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
    let replay = |max_keys: &str| bucket(&["replay", "--trace", &trace, "--max-keys", max_keys]);
    let unbounded = replay("1000000");
    // 200 keys are limited at any time: room for them loses nothing.
    let bounded = replay("1000");
    assert_exit(&bounded, 0);
    assert_eq!(bounded.stdout, unbounded.stdout);
    assert_eq!(stderr(&bounded), "");
    // Too little room: the same decisions here (one request per key), but a warning.
    let tight = replay("10");
    assert_exit(&tight, 0);
    assert_contains(
        &stderr(&tight),
        "keys were forgotten before their state was fresh",
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
    let mut child = spawn(with(&["replay", "--trace", &trace], &BUCKET));
    {
        use std::io::Read;
        let mut first = [0u8; 100];
        child.stdout.take().unwrap().read_exact(&mut first).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert_exit(&out, 5);
    assert_eq!(stderr(&out), "");
}

/// A fourth column `kind`: a report charges what the work cost beyond the decision (up
/// to the limit, no overdraft), a refund gives units back; each prints the units it
/// recorded and dropped with the key's standing after it.
#[test]
fn report_and_refund_rows_move_the_key() {
    let (dir, trace) = temp_file(
        "t.csv",
        "t_us,key,cost,kind\n0,k,2\n0,k,5,report\n0,k,3,decide\n0,k,4,refund\n0,k,3,\n",
    );
    let rate = "--algorithm fixed-window --limit 5 --period 1s";
    let out = run_line(&format!("replay --trace {trace} {rate}"));
    assert_exit(&out, 0);
    let rest = r#""reset_after_us":1000000,"delay_us":0}"#;
    let lines: Vec<String> = [
        r#"{"t_us":0,"key":"k","cost":2,"allowed":true,"limit":5,"remaining":3,"retry_after_us":0,"#,
        r#"{"t_us":0,"key":"k","cost":5,"kind":"report","recorded":3,"dropped":2,"allowed":true,"limit":5,"remaining":0,"retry_after_us":0,"#,
        r#"{"t_us":0,"key":"k","cost":3,"allowed":false,"limit":5,"remaining":0,"retry_after_us":1000000,"#,
        r#"{"t_us":0,"key":"k","cost":4,"kind":"refund","recorded":4,"dropped":0,"allowed":true,"limit":5,"remaining":4,"retry_after_us":0,"#,
        r#"{"t_us":0,"key":"k","cost":3,"allowed":true,"limit":5,"remaining":1,"retry_after_us":0,"#,
    ]
    .iter()
    .map(|l| format!("{l}{rest}\n"))
    .collect();
    assert_eq!(stdout(&out), lines.concat());

    let bad = write(dir.path(), "bad.csv", "t_us,key,cost,kind\n0,k,1,charge\n");
    let out = run_line(&format!("replay --trace {bad} {rate}"));
    assert_exit(&out, 2);
    assert_contains(
        &stderr(&out),
        "bad.csv:2: kind must be decide, report or refund",
    );
    // Without the header's fourth column, a row has three fields.
    let short = write(dir.path(), "short.csv", "t_us,key,cost\n0,k,1,report\n");
    let out = run_line(&format!("replay --trace {short} {rate}"));
    assert_exit(&out, 2);
    assert_contains(&stderr(&out), "short.csv:2: expected 3 fields");
}

/// Reports replay the same on every host: sled and Redis (its scripts) print what memory
/// prints, row for row.
#[test]
fn reports_replay_the_same_on_memory_sled_and_redis() {
    let (dir, trace) = temp_file(
        "t.csv",
        "t_us,key,cost,kind\n0,k,2\n10,k,9,report\n20,k,1\n30,k,4,refund\n40,j,3\n1000050,k,2\n",
    );
    let config = write(
        dir.path(),
        "p.toml",
        "[policies.api]\nalgorithm = \"token-bucket\"\ncapacity = 5\nrate = 5\nperiod = \"1s\"\noverdraft = 3\n",
    );
    let db = dir.path().join("db");
    let replay = |backend: &str| {
        replayed(&format!(
            "replay --trace {trace} --config {config} --policy api --backend {backend}"
        ))
    };
    let memory = replay("memory");
    assert_contains(&memory, r#""kind":"report","recorded":6,"dropped":3"#);
    assert_eq!(replay(&format!("sled:{}", db.display())), memory);
    let redis = common::Server::start();
    assert_eq!(replay(&redis.url()), memory);
}

/// The core's whole range on a plain Redis (the scripts, no module): limits, capacities
/// and rates near 10^9 and periods of 366 days replay exactly as in memory, for every
/// algorithm the scripts take at that range (a bucket's horizon within 0.3 % of the
/// core's longest, 2^53 µs), at times from the Unix epoch, across 2^52 µs (where the
/// scripts' instants stop being doubles) and up to the core's last.
#[test]
fn the_top_of_the_range_replays_on_redis_as_in_memory() {
    let (dir, config) = temp_file(
        "p.toml",
        r#"
[policies.window]
algorithm = "fixed-window"
limit = 999999937
period = "366d"
[policies.counter]
algorithm = "sliding-counter"
limit = 1000000000
period = "365d"
[policies.tokens]
algorithm = "token-bucket"
capacity = 1000000000
rate = 999999999
period = "366d"
[policies.funnel]
algorithm = "leaky-bucket"
capacity = 999999000
rate = 100000007
period = "366d"
[policies.paced]
algorithm = "pacing"
capacity = 1000000000
rate = 999999937
period = "366d"
[policies.deep]
algorithm = "leaky-bucket"
capacity = 284
rate = 1
period = "366d"
[policies.banned]
algorithm = "fixed-window"
limit = 999999999
period = "366d"
ban = { threshold = 2, window = "1d", duration = "366d" }
[policies.both]
algorithm = "composite"
limits = [
  { algorithm = "fixed-window", limit = 1000000000, period = "366d" },
  { algorithm = "token-bucket", capacity = 999999999, rate = 1000000000, period = "365d" },
]
"#,
    );
    // Costs at and beyond the limits, times days and months apart.
    let day = 86_400_000_000u64;
    let mut trace = String::from("t_us,key,cost\n");
    let starts = [0, (1 << 52) - 200 * day, (1 << 62) - 367 * day];
    let steps = [
        (0, 1),
        (1, 999_999_000),
        (day, 999_999_999),
        (day + 7, 1_000_000_000),
        (40 * day, 500_000_000),
        (200 * day + 3, 700_000_001),
        (366 * day, 1),
        (366 * day + 1, 999_999_937),
    ];
    for (s, start) in starts.into_iter().enumerate() {
        for (i, (t, cost)) in steps.into_iter().enumerate() {
            trace += &format!("{},k{s}{},{cost}\n", start + t, i % 2);
        }
    }
    let trace = write(dir.path(), "t.csv", &trace);
    let redis = common::Server::start();
    for policy in [
        "window", "counter", "tokens", "funnel", "paced", "deep", "banned", "both",
    ] {
        let replay = |backend: &str| {
            replayed(&format!(
                "replay --trace {trace} --config {config} --policy {policy} --backend {backend}"
            ))
        };
        let memory = replay("memory");
        assert_eq!(replay(&redis.url()), memory, "{policy}");
        assert_contains(&memory, r#""allowed":true"#);
    }
}
