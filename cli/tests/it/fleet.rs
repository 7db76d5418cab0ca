//! `sluicegate fleet` with real node processes on a real `redis-server`: prefetch's
//! ceiling under random traffic (never above the limit in any period, also while a
//! node is killed and one joins), and fleet settings that cannot work refused.

use crate::common::{self, assert_exit, sluicegate};

/// Runs a measurement and returns its JSON report.
fn measure(server: &common::Server, policy: &[&str], extra: &[&str]) -> serde_json::Value {
    let url = server.url();
    let mut args = vec!["fleet", "--backend", &url, "--json"];
    args.extend(policy);
    args.extend(extra);
    let out = sluicegate(&args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Admitted units in no period above what the policy allows, nor beyond the ceiling.
fn assert_ceiling(report: &serde_json::Value, limit: u64) {
    assert_eq!(report["ceiling_exceeded"], 0, "{report}");
    for phase in [report, &report["kill"], &report["join"]] {
        assert_eq!(phase["max_over_admitted"], 0, "{report}");
    }
    let periods = report["periods"].as_array().unwrap();
    assert!(periods.len() >= 7);
    for row in periods {
        assert!(row["admitted"].as_u64().unwrap() <= row["allowance"].as_u64().unwrap().max(limit));
    }
    // Demand is twice the limit: periods are not left empty.
    let busiest = periods
        .iter()
        .map(|r| r["admitted"].as_u64().unwrap())
        .max();
    assert!(busiest.unwrap() >= limit / 2, "{report}");
}

/// Three prefetch nodes on one Redis, 1.4 s of Poisson traffic at 700 per second each
/// (`seed`), taking at most `max_batch` units at once: the measurement's report.
fn prefetch(policy: &[&str], max_batch: &str, seed: u64) -> serde_json::Value {
    let server = common::Server::start();
    let run = [
        "--nodes",
        "3",
        "--mode",
        "prefetch",
        "--max-batch",
        max_batch,
        "--interval",
        "20ms",
    ];
    let traffic = format!("poisson:rate=700,seed={seed}");
    let traffic = ["--traffic", &traffic, "--duration", "1400ms"];
    measure(&server, policy, &[&run[..], &traffic[..]].concat())
}

#[test]
fn prefetch_nodes_never_exceed_a_window_with_random_traffic() {
    let policy = [
        "--algorithm",
        "fixed-window",
        "--limit",
        "200",
        "--period",
        "200ms",
    ];
    let report = prefetch(&policy, "40", 5);
    assert_ceiling(&report, 200);
    assert!(report["redis_calls_per_1000"].as_f64().unwrap() < 1000.0);
}

#[test]
fn prefetch_nodes_never_exceed_a_bucket_with_random_traffic() {
    let policy = [
        "--algorithm",
        "token-bucket",
        "--capacity",
        "100",
        "--rate",
        "200",
        "--period",
        "200ms",
    ];
    let report = prefetch(&policy, "30", 9);
    assert_eq!(report["ceiling_exceeded"], 0, "{report}");
}

#[test]
fn settings_that_cannot_work_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let url = "redis://127.0.0.1:1";
    let window = [
        "--algorithm",
        "fixed-window",
        "--limit",
        "100",
        "--period",
        "1s",
    ];
    let run = |extra: &[&str]| {
        let mut args = vec![
            "fleet",
            "--backend",
            url,
            "--traffic",
            "steady:rate=10",
            "--duration",
            "5s",
        ];
        args.extend(extra);
        let out = sluicegate(&args);
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        )
    };
    let refused = |extra: &[&str], message: &str| {
        assert_eq!(
            run(extra),
            (Some(2), format!("sluicegate: {message}")),
            "{extra:?}"
        );
    };
    refused(
        &[&window[..], &["--mode", "batch", "--max-batch", "0"]].concat(),
        "fleet setting max_batch: must be at least 1",
    );
    refused(
        &[&window[..], &["--mode", "prefetch", "--max-batch", "101"]].concat(),
        "fleet setting max_batch: 101 is above the limit of 100",
    );
    let (code, stderr) = run(&[&window[..], &["--mode", "fast"]].concat());
    assert_eq!(code, Some(2));
    assert!(
        stderr.contains("unknown mode \"fast\": use exact, prefetch, batch or split"),
        "{stderr}"
    );
    refused(
        &["--algorithm", "leaky-bucket", "--capacity", "5", "--rate", "5", "--period", "1s"],
        "policy \"leaky-bucket-5-5-1s\": a fleet shares a token bucket, a fixed window or a sliding counter, whose units can be handed out and given back",
    );
    // The policy file's fleet table is read, and refused the same way.
    let file = dir.path().join("policies.toml");
    std::fs::write(
        &file,
        "[policies.api]\nalgorithm = \"token-bucket\"\ncapacity = 50\nrate = 50\nperiod = \"1s\"\nfleet = { mode = \"batch\", max_batch = 51 }\n",
    )
    .unwrap();
    let file = file.to_str().unwrap();
    refused(
        &["--config", file, "--policy", "api"],
        "fleet setting max_batch: 51 is above the limit of 50",
    );
    let out = sluicegate([
        "fleet",
        "--backend",
        "memory",
        "--config",
        file,
        "--policy",
        "api",
        "--max-batch",
        "10",
        "--traffic",
        "steady:rate=10",
        "--duration",
        "5s",
    ]);
    assert_exit(&out, 2);
    assert!(String::from_utf8_lossy(&out.stderr).contains("through Redis"));
}
