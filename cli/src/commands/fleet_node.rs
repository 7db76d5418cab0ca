//! `sluicegate fleet-node` (hidden): one node of a `sluicegate fleet` measurement, started
//! by it. It offers its traffic to its own fleet limiter on the shared key and prints
//! one JSON line per period of the policy.

use std::io::Write;
use std::sync::Arc;
use std::time::{Duration as StdDuration, Instant};

use clap::Args;
use sluicegate_core::{AnyAlgorithm, Ticks};
use sluicegate_policy::Built;
use sluicegate_redis::fleet::{FleetAlgorithm, FleetConfig, FleetLimiter, FleetMode};
use sluicegate_redis::{Reconnecting, RedisLimiter};

use super::fleet::{bad, fleet_mode, wall, Line};
use crate::args::PolicyArgs;
use crate::failure::{output, Failure};
use crate::traffic::Traffic;

/// The hidden `fleet-node` subcommand: one node of a measurement.
#[derive(Debug, Args)]
pub struct NodeArgs {
    #[command(flatten)]
    policy: PolicyArgs,
    #[arg(long)]
    url: String,
    #[arg(long)]
    key_prefix: String,
    #[arg(long, value_parser = fleet_mode)]
    mode: FleetMode,
    #[arg(long)]
    max_batch: u64,
    #[arg(long)]
    interval_us: u64,
    #[arg(long)]
    traffic: Traffic,
    /// The run's start, µs since the Unix epoch (a multiple of the period).
    #[arg(long)]
    start_us: u64,
    #[arg(long)]
    duration_us: u64,
    /// Offer only the traffic from this far into the run (a node joining late).
    #[arg(long, default_value_t = 0)]
    from_us: u64,
    #[arg(long)]
    index: u64,
}

/// One node: offers its traffic to its fleet limiter and prints a line per period.
pub fn run(args: NodeArgs) -> Result<std::process::ExitCode, Failure> {
    let loaded = args.policy.load()?;
    match loaded.built {
        Built::Rule(AnyAlgorithm::TokenBucket(a)) => run_node(&args, a),
        Built::Rule(AnyAlgorithm::FixedWindow(a)) => run_node(&args, a),
        Built::Rule(AnyAlgorithm::SlidingCounter(a)) => run_node(&args, a),
        _ => Err(bad(
            "a fleet node needs a token bucket, a fixed window or a sliding counter".into(),
        )),
    }
}

fn run_node<A: FleetAlgorithm>(
    args: &NodeArgs,
    algorithm: A,
) -> Result<std::process::ExitCode, Failure> {
    let backend = |e: sluicegate_redis::Error| Failure::Backend(e.to_string());
    let client = sluicegate_redis::client(&args.url, None).map_err(backend)?;
    let limiter = RedisLimiter::new(algorithm)
        .map_err(backend)?
        .with_prefix(args.key_prefix.as_bytes());
    let config = FleetConfig {
        max_batch: args.max_batch,
        interval: Some(StdDuration::from_micros(args.interval_us)),
        ..FleetConfig::new(args.mode)
    };
    let fleet = Arc::new(
        FleetLimiter::new(limiter, b"fleet", config)
            .map_err(backend)?
            .with_node_id(format!("node-{:03}", args.index)),
    );
    let timeout = StdDuration::from_millis(200);
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Upkeep on a connection of its own.
    let upkeep = {
        let (fleet, done) = (fleet.clone(), done.clone());
        let mut con = Reconnecting::new(client.clone()).with_timeout(timeout);
        std::thread::spawn(move || {
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = fleet.tick(&mut con);
                std::thread::sleep(StdDuration::from_millis(2));
            }
            let _ = fleet.shutdown(&mut con);
        })
    };
    let mut con = Reconnecting::new(client).with_timeout(timeout);
    let period = algorithm_period(&args.policy)?;
    // Local time of the run's start: the wall clock read once, then a monotonic clock.
    let (origin, origin_wall) = (Instant::now(), wall());
    let at = |offset: Ticks| {
        origin + StdDuration::from_micros((args.start_us + offset).saturating_sub(origin_wall))
    };
    let traffic = args.traffic.for_node(args.index);
    // Nodes' steady arrivals are spread over the gap rather than all at once.
    let phase = args.index * 61 % 1000;
    let mut current = Line::default();
    let mut stdout = std::io::stdout().lock();
    let flush = |line: &Line, out: &mut std::io::StdoutLock<'_>| -> Result<(), Failure> {
        let text = serde_json::to_string(line).map_err(|e| Failure::Output(e.to_string()))?;
        writeln!(out, "{text}")
            .and_then(|()| out.flush())
            .map_err(output)
    };
    for request in traffic.requests(args.duration_us) {
        let offset = request.at + phase;
        if offset < args.from_us || offset >= args.duration_us {
            continue;
        }
        let due = at(offset);
        let now = Instant::now();
        if due > now {
            std::thread::sleep(due - now);
        }
        // The period by the wall clock itself, which the server's windows follow: a
        // local clock anchored to it once would carry the anchoring's error (a
        // preemption between the two reads) into every period's count.
        let before = wall();
        let began = Instant::now();
        let last_call = fleet.last_server_now();
        let allowed = fleet
            .check(&mut con, request.cost)
            .map(|o| o.allowed())
            .unwrap_or(false);
        // A decision that called Redis was made at the server's time of that call (a
        // call sent just before a boundary may be decided in the next window); one made
        // locally, when it began.
        let decided_at = match fleet.last_server_now() {
            server if server != last_call => server,
            _ => before,
        };
        let k = decided_at.saturating_sub(args.start_us) / period;
        if k != current.period && (current.admitted + current.denied) > 0 {
            flush(&current, &mut stdout)?;
            current = Line {
                period: k,
                calls: current.calls,
                decisions: current.decisions,
                busy_ns: current.busy_ns,
                ..Line::default()
            };
        }
        current.period = k;
        current.busy_ns += u64::try_from(began.elapsed().as_nanos()).unwrap_or(u64::MAX);
        current.decisions += 1;
        current.calls = fleet.calls();
        if allowed {
            current.admitted += request.cost;
        } else {
            current.denied += request.cost;
        }
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = upkeep.join();
    current.calls = fleet.calls();
    if current.admitted + current.denied > 0 {
        flush(&current, &mut stdout)?;
    }
    Ok(std::process::ExitCode::SUCCESS)
}

fn algorithm_period(policy: &PolicyArgs) -> Result<Ticks, Failure> {
    Ok(policy.load()?.policy.period().max(1))
}
