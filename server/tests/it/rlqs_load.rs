//! The quota service's cost per report: 100 streams of 50 buckets each (5 000
//! subscriptions on 50 shared limits) sending full reports as fast as they are
//! answered, measured as this process's CPU time (server and clients together, so an
//! upper bound on the server's), and each round of reports answered in full. The bound
//! is a regression guard, 12 times the figure measured (`BENCHMARKS.md`).

use std::time::Duration;

use crate::common::*;
use sluicegate_server::grpc::envoy::service::rate_limit_quota::v3::RateLimitQuotaUsageReports;
use sluicegate_server::Config;
use tokio::time::Instant;

const STREAMS: usize = 100;
const BUCKETS: usize = 50;
const ROUNDS: usize = 40;

/// This process's CPU time (user and system), from `/proc/self/stat`, in clock ticks.
fn cpu_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
    // Fields after the command's closing parenthesis: utime and stime are 12th and 13th.
    let rest = &stat[stat.rfind(')').expect("a command") + 2..];
    let fields: Vec<u64> = rest
        .split(' ')
        .skip(11)
        .take(2)
        .map(|f| f.parse().unwrap())
        .collect();
    fields.iter().sum()
}

/// One report on every stream, and every stream's answers for all its buckets.
async fn round(streams: &mut [Opened], report: &RateLimitQuotaUsageReports) {
    for (outbox, _) in streams.iter() {
        outbox.send(report.clone()).expect("sent");
    }
    for (_, responses) in streams.iter_mut() {
        let mut answered = 0;
        while answered < BUCKETS {
            let next = tokio::time::timeout(Duration::from_secs(10), responses.message());
            let response = next.await.expect("answered within 10 s").unwrap().unwrap();
            answered += response.bucket_action.len();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rlqs_a_report_of_50_buckets_costs_well_under_5_ms_of_cpu() {
    let (server, admin) = TestServer::start_with(Config {
        grpc_listen: Some("127.0.0.1:0".parse().unwrap()),
        ..config()
    })
    .await;
    let web = app(&server, &admin, "web").await;
    let policy =
        r#"{"algorithm":"token-bucket","capacity":100,"rate":1000,"period":"1s","apps":["web"]}"#;
    create_policy(&server, &admin, "api", policy).await;
    let grpc = server.grpc.unwrap();
    let names: Vec<String> = (0..BUCKETS).map(|i| format!("t{i}")).collect();
    let entries: Vec<[(&str, &str); 1]> = names.iter().map(|n| [("tenant", n.as_str())]).collect();
    let usages: Vec<(&[(&str, &str)], u64)> = entries.iter().map(|e| (&e[..], 7)).collect();
    let report = super::rlqs::report("api", &usages);
    let mut streams = Vec::with_capacity(STREAMS);
    for _ in 0..STREAMS {
        streams.push(open(grpc, Some(&web)).await.expect("a stream"));
    }
    // Subscribing, once.
    round(&mut streams, &report).await;
    let (ticks, start) = (cpu_ticks(), Instant::now());
    for _ in 0..ROUNDS {
        round(&mut streams, &report).await;
    }
    let (cpu_ms, wall) = ((cpu_ticks() - ticks) * 10, start.elapsed());
    let reports = (ROUNDS * STREAMS) as u64;
    let per_report_us = cpu_ms * 1000 / reports;
    eprintln!(
        "{reports} reports of {BUCKETS} buckets in {wall:?}: {cpu_ms} ms CPU, {per_report_us} µs per report, {} µs per bucket",
        cpu_ms * 1000 / (reports * BUCKETS as u64)
    );
    assert!(per_report_us < 5000, "{per_report_us} µs of CPU per report");
}
