//! Envoy's quota protocol (RLQS) under load: `--streams` proxies, each one stream holding
//! `--buckets` buckets and reporting as Envoy does (a new bucket's first request alone at
//! once, then every 5 s one report of every bucket), against a `sluicegate serve`
//! process. Measured: the server's (and Redis's) CPU per report message and per bucket
//! reported, the server's memory per subscribed bucket, and beside it the CPU the same
//! requests would cost decided one by one over RLS (`ShouldRateLimit`), as a ratio.
//!
//! ```text
//! cargo run --release -p sluicegate-benches --bin load -- --protocol rlqs
//!     [--backend memory|redis|redis://…] [--streams 1000] [--buckets 50] [--keys 50]
//!     [--bucket-rate 10] [--duration 30] [--connections 100] [--json]
//! ```
//!
//! Bucket `b` of stream `s` is the key `k{(s × buckets + b) mod keys}`: with `--keys`
//! equal to `--buckets` every proxy holds the same buckets (each limit shared by every
//! stream); with `--keys` = streams × buckets each bucket is a limit of its own. Each
//! stream reports at its own offset within the interval, as proxies started at different
//! times do, and `--bucket-rate` requests a second allowed in every bucket.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use sluicegate_server::grpc::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_client::RateLimitQuotaServiceClient;
use sluicegate_server::grpc::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use sluicegate_server::grpc::envoy::service::rate_limit_quota::v3::{
    BucketId, RateLimitQuotaUsageReports,
};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tonic::transport::{Channel, Endpoint};

use crate::measure::Load;
use crate::procs::{cpu_us, rss_bytes, sluicegate, sluicegate_bin, Running};
use crate::side::Redis;
use crate::{grpc, Options};

/// How often Envoy reports (fixed in its filter today).
const INTERVAL: Duration = Duration::from_secs(5);
/// Intervals before measuring: the first full reports, then the demands settling (a
/// first report measures 1 request over the time to the proxy's tick).
const WARM_UP: u32 = 6;
/// The domain the streams report in: a token bucket policy of the server.
const DOMAIN: &str = "bench_tb";

/// What the streams sent and received, counted across all of them.
#[derive(Debug, Default)]
struct Counts {
    messages: AtomicU64,
    buckets: AtomicU64,
    answers: AtomicU64,
    errors: AtomicU64,
    first_error: std::sync::OnceLock<String>,
}

/// The figures of one run, counted between two readings.
#[derive(Debug, Clone, Copy, Default)]
struct Reading {
    server_us: u64,
    redis_us: u64,
    messages: u64,
    buckets: u64,
    answers: u64,
}

/// A report of one bucket: its requests over `elapsed` whole seconds.
fn usage(key: u64, allowed: u64, elapsed: i64) -> BucketQuotaUsage {
    BucketQuotaUsage {
        bucket_id: Some(BucketId {
            bucket: [("k".to_owned(), format!("k{key}"))].into_iter().collect(),
        }),
        time_elapsed: Some(prost_types::Duration {
            seconds: elapsed,
            nanos: 0,
        }),
        num_requests_allowed: allowed,
        ..BucketQuotaUsage::default()
    }
}

/// One proxy's stream: its buckets' first reports at once, then a full report every
/// interval from `offset` on, until `end`; every answer drained.
async fn proxy(
    channel: Channel,
    token: tonic::metadata::MetadataValue<tonic::metadata::Ascii>,
    keys: Vec<u64>,
    bucket_rate: u64,
    offset: Duration,
    end: Instant,
    counts: Arc<Counts>,
) {
    let (outbox, inbox) = mpsc::channel::<RateLimitQuotaUsageReports>(keys.len() + 1);
    let reports = futures_util::stream::unfold(inbox, |mut inbox| async move {
        inbox.recv().await.map(|report| (report, inbox))
    });
    let mut request = tonic::Request::new(reports);
    request.metadata_mut().insert("authorization", token);
    let send = async {
        let report = |usages| RateLimitQuotaUsageReports {
            domain: DOMAIN.to_owned(),
            bucket_quota_usages: usages,
        };
        for &key in &keys {
            counts.messages.fetch_add(1, Ordering::Relaxed);
            counts.buckets.fetch_add(1, Ordering::Relaxed);
            if outbox.send(report(vec![usage(key, 1, 0)])).await.is_err() {
                return;
            }
        }
        let mut tick = tokio::time::interval_at(Instant::now() + offset, INTERVAL);
        loop {
            if tick.tick().await >= end {
                return;
            }
            let allowed = bucket_rate * INTERVAL.as_secs();
            let elapsed = i64::try_from(INTERVAL.as_secs()).unwrap_or(5);
            let usages = keys.iter().map(|&k| usage(k, allowed, elapsed)).collect();
            counts.messages.fetch_add(1, Ordering::Relaxed);
            counts
                .buckets
                .fetch_add(keys.len() as u64, Ordering::Relaxed);
            if outbox.send(report(usages)).await.is_err() {
                return;
            }
        }
    };
    let receive = async {
        let mut answers = RateLimitQuotaServiceClient::new(channel)
            .stream_rate_limit_quotas(request)
            .await?
            .into_inner();
        while let Some(answer) = answers.message().await? {
            counts.answers.fetch_add(1, Ordering::Relaxed);
            drop(answer);
        }
        Ok::<_, tonic::Status>(())
    };
    tokio::select! {
        () = send => {}
        received = receive => {
            if let Err(status) = received {
                counts.errors.fetch_add(1, Ordering::Relaxed);
                let _ = counts.first_error.set(status.to_string());
            }
        }
    }
}

/// The CPU, the messages and the answers so far.
fn read(running: &Running, redis: Option<&Redis>, counts: &Counts) -> Reading {
    Reading {
        server_us: cpu_us(running.pid()).unwrap_or(0),
        redis_us: redis.and_then(|r| r.pid).and_then(cpu_us).unwrap_or(0),
        messages: counts.messages.load(Ordering::Relaxed),
        buckets: counts.buckets.load(Ordering::Relaxed),
        answers: counts.answers.load(Ordering::Relaxed),
    }
}

/// The server's CPU per decision over RLS on the same keys, measured for 5 s.
async fn rls_cpu_per_decision(running: &Running, options: &Options) -> Result<f64, String> {
    let calls = grpc::Calls::new(DOMAIN, &running.token, options.keys)?;
    let load = Load {
        workers: 4 * options.in_flight,
        duration: Duration::from_secs(1),
        requests: None,
        rate: None,
    };
    grpc::phase(&running.grpc, &calls, 4, load).await?;
    let before = cpu_us(running.pid());
    let phase = grpc::phase(
        &running.grpc,
        &calls,
        4,
        Load {
            duration: Duration::from_secs(5),
            ..load
        },
    )
    .await?;
    let spent = cpu_us(running.pid())
        .zip(before)
        .and_then(|(after, before)| after.checked_sub(before))
        .ok_or("the server's CPU time cannot be read")?;
    Ok(spent as f64 / phase.requests.max(1) as f64)
}

/// The run: streams opened and subscribed, then measured for `--duration`.
async fn measure(options: &Options, redis: Option<&Redis>) -> Result<Value, String> {
    let bin = sluicegate_bin()?;
    let running = sluicegate(&bin, redis.map(|r| r.url.as_str()), None).await?;
    let token: tonic::metadata::MetadataValue<_> = format!("Bearer {}", running.token)
        .parse()
        .map_err(|e| format!("a token that is not metadata: {e}"))?;
    let endpoint = Endpoint::from_shared(format!("http://{}", running.grpc))
        .map_err(|e| e.to_string())?
        .tcp_nodelay(true);
    let mut channels = Vec::with_capacity(options.connections);
    for _ in 0..options.connections {
        channels.push(endpoint.connect().await.map_err(|e| e.to_string())?);
    }
    let idle_rss = rss_bytes(running.pid()).unwrap_or(0);
    let counts = Arc::new(Counts::default());
    let (streams, buckets) = (options.streams, options.buckets);
    let start = Instant::now();
    let measured = start + INTERVAL * WARM_UP + Duration::from_millis(500);
    let end = measured + options.duration + INTERVAL;
    let tasks: Vec<_> = (0..streams)
        .map(|s| {
            let keys = (0..buckets)
                .map(|b| (s * buckets + b) % options.keys)
                .collect();
            let offset = INTERVAL.mul_f64(s as f64 / streams as f64);
            tokio::spawn(proxy(
                channels[usize::try_from(s).unwrap_or(0) % channels.len()].clone(),
                token.clone(),
                keys,
                options.bucket_rate,
                offset,
                end,
                Arc::clone(&counts),
            ))
        })
        .collect();
    tokio::time::sleep_until(measured).await;
    let subscribed_rss = rss_bytes(running.pid()).unwrap_or(0);
    let before = read(&running, redis, &counts);
    tokio::time::sleep(options.duration).await;
    let after = read(&running, redis, &counts);
    for task in tasks {
        task.abort();
    }
    let errors = counts.errors.load(Ordering::Relaxed);
    if let Some(why) = counts.first_error.get() {
        eprintln!("load: {errors} streams ended with an error, the first: {why}");
    }
    let messages = (after.messages - before.messages).max(1) as f64;
    let reported = (after.buckets - before.buckets).max(1) as f64;
    let server_us = (after.server_us - before.server_us) as f64;
    let redis_us = (after.redis_us - before.redis_us) as f64;
    let seconds = options.duration.as_secs_f64();
    let rls_us = rls_cpu_per_decision(&running, options).await?;
    // What the proxies decided locally, a second: every bucket's requests.
    let requests_per_sec = (streams * buckets * options.bucket_rate) as f64;
    let round = |x: f64| (x * 100.0).round() / 100.0;
    let subscribed = (streams * buckets).max(1) as f64;
    Ok(json!({
        "backend": if redis.is_some() { "redis" } else { "memory" },
        "streams": streams,
        "buckets_per_stream": buckets,
        "keys": options.keys,
        "report_messages_per_sec": round(messages / seconds),
        "answers_per_sec": round((after.answers - before.answers) as f64 / seconds),
        "server_cpu_us_per_message": round(server_us / messages),
        "server_cpu_us_per_bucket": round(server_us / reported),
        "redis_cpu_us_per_message": redis.map(|_| round(redis_us / messages)),
        "server_cores": round(server_us / seconds / 1e6),
        // Streams reporting every 5 s that one core takes, at this run's cost per message.
        "proxies_per_core": (INTERVAL.as_secs_f64() * 1e6 / (server_us / messages).max(1e-3)).round(),
        "server_rss_bytes_per_subscribed_bucket": round(subscribed_rss.saturating_sub(idle_rss) as f64 / subscribed),
        "requests_decided_by_proxies_per_sec": requests_per_sec,
        "rls_server_cpu_us_per_decision": round(rls_us),
        // The server's CPU for these requests over RLS, over its CPU for them over RLQS.
        "rls_over_rlqs_cpu": round(requests_per_sec * rls_us / (server_us / seconds).max(1.0)),
        "stream_errors": errors,
    }))
}

/// The RLQS row on `options.backend`.
pub fn run(options: &Options) -> std::process::ExitCode {
    let setup = options
        .backend
        .as_deref()
        .map(Redis::new)
        .transpose()
        .and_then(|redis| Ok((crate::runtime("load")?, redis)));
    let (runtime, redis) = match setup {
        Ok(setup) => setup,
        Err(e) => {
            eprintln!("load: {e}");
            return std::process::ExitCode::from(4);
        }
    };
    match runtime.block_on(measure(options, redis.as_ref())) {
        Ok(row) if options.json => println!("{row}"),
        Ok(row) => {
            for (name, value) in row.as_object().into_iter().flatten() {
                println!("{name:<42} {value}");
            }
        }
        Err(e) => {
            eprintln!("load: rlqs: {e}");
            return std::process::ExitCode::from(3);
        }
    }
    std::process::ExitCode::SUCCESS
}
