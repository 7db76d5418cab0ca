//! `sluicegate fleet`: measures a fleet mode with real node processes on one Redis.
//!
//! The command starts N node processes (this binary, re-invoked as the hidden
//! `fleet-node` subcommand), each offering the traffic to its own
//! [`FleetLimiter`](sluicegate_redis::fleet::FleetLimiter) on the shared key, SIGKILLs node
//! 0 at 40% of the run and starts one more node at 70%. Nodes print one JSON line per
//! period of the policy; the command adds them up and compares each period's admitted
//! units with what one exact limiter would admit: over-admission is what exceeds the
//! most it could admit (a window's limit; a bucket's saved tokens, carried from the
//! admitted counts up to its capacity, plus one period's refill), under-admission what
//! falls short of the least it admits under the same demand (the limit or one period's
//! refill, or the demand if smaller). Percentages are of the limit or refill.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::Args;
use serde::{Deserialize, Serialize};
use sluicegate_core::Ticks;
use sluicegate_redis::fleet::{FleetAlgorithm, FleetConfig, FleetMode};

use crate::args::{whole, PolicyBackendArgs};
use crate::backend::{Backend, RedisTarget};
use crate::chart;
use crate::failure::{output, Failure};
use crate::traffic::Traffic;
use sluicegate_core::AnyAlgorithm;
use sluicegate_policy::{human, Built, Policy, PolicyDuration};

/// `sluicegate fleet`'s flags.
#[derive(Debug, Args)]
pub struct FleetArgs {
    #[command(flatten)]
    target: PolicyBackendArgs,
    /// How many node processes share the limit (one more joins mid-run).
    #[arg(long, default_value_t = 8, value_parser = whole)]
    nodes: u64,
    /// exact | prefetch | batch | split (default: the policy's `fleet.mode`, else prefetch).
    #[arg(long, value_parser = fleet_mode)]
    mode: Option<FleetMode>,
    /// Prefetch: the most units one take asks for; batch: decisions between settles
    /// (default: the policy's `fleet.max_batch`, else 100).
    #[arg(long, value_parser = whole, allow_negative_numbers = true)]
    max_batch: Option<u64>,
    /// Prefetch: the wait before asking a drained limit again; batch: the longest time
    /// between settles; split: the heartbeat period (default: the policy's, else 100ms,
    /// 100ms, 1s).
    #[arg(long, value_parser = sluicegate_policy::parse_duration)]
    interval: Option<PolicyDuration>,
    /// Each node's traffic: steady:rate=R | poisson:rate=R,seed=S | burst:size=N,every=D.
    #[arg(long)]
    traffic: Traffic,
    /// How long to run, at least 5 periods of the policy.
    #[arg(long, value_parser = sluicegate_policy::parse_duration)]
    duration: PolicyDuration,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// Write an SVG chart of admitted and denied per period against the limit.
    #[arg(long)]
    chart: Option<String>,
}

/// What a node prints for each period, and at the end.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(super) struct Line {
    pub(super) period: u64,
    pub(super) admitted: u64,
    pub(super) denied: u64,
    /// Cumulative, as of the end of the period.
    pub(super) calls: u64,
    pub(super) decisions: u64,
    pub(super) busy_ns: u64,
}

pub(super) fn wall() -> Ticks {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    sluicegate_core::ticks(since)
}

pub(super) fn bad(message: String) -> Failure {
    Failure::Input(message)
}

/// `--mode`: a fleet mode's name.
pub(super) fn fleet_mode(name: &str) -> Result<FleetMode, String> {
    FleetMode::from_name(name)
        .ok_or_else(|| format!("unknown mode {name:?}: use exact, prefetch, batch or split"))
}

/// The settings a run uses: flags over the policy's `fleet` table over defaults.
fn settings(args: &FleetArgs, policy: &Policy) -> Result<FleetConfig, Failure> {
    let table = policy.fleet.clone().unwrap_or_default();
    let mode = args.mode.or(table.mode).unwrap_or(FleetMode::Prefetch);
    Ok(FleetConfig {
        mode,
        max_batch: args.max_batch.or(table.max_batch).unwrap_or(100),
        interval: args
            .interval
            .or(table.interval)
            .map(|d| Duration::from_micros(d.0)),
    })
}

/// Runs `job` on the policy's algorithm if a fleet can share it.
fn with_algorithm<R>(
    built: &Built,
    name: &str,
    job: impl FnOnce(&dyn Fn(&FleetConfig) -> Result<(), String>) -> R,
) -> Result<R, Failure> {
    fn validate<A: FleetAlgorithm>(a: A) -> impl Fn(&FleetConfig) -> Result<(), String> {
        move |c: &FleetConfig| c.validate(&a).map_err(|e| e.to_string())
    }
    Ok(match built {
        Built::Rule(AnyAlgorithm::TokenBucket(a)) => job(&validate(*a)),
        Built::Rule(AnyAlgorithm::FixedWindow(a)) => job(&validate(*a)),
        Built::Rule(AnyAlgorithm::SlidingCounter(a)) => job(&validate(*a)),
        _ => {
            return Err(bad(format!(
                "policy {name:?}: a fleet shares a token bucket, a fixed window or a sliding counter, whose units can be handed out and given back"
            )))
        }
    })
}

/// Figures for a span of periods.
#[derive(Debug, Default, Serialize)]
struct Errors {
    /// Periods measured.
    periods: u64,
    max_over_admitted: u64,
    max_over_admitted_pct: f64,
    max_under_admitted: u64,
    max_under_admitted_pct: f64,
}

#[derive(Debug, Serialize)]
struct PeriodRow {
    period: u64,
    offered: u64,
    admitted: u64,
    allowance: u64,
}

#[derive(Debug, Serialize)]
struct Report {
    mode: String,
    nodes: u64,
    traffic: String,
    duration_us: Ticks,
    period_us: Ticks,
    /// Decisions a node made per second of its time spent deciding (its capacity).
    decisions_per_sec_per_node: f64,
    /// Decisions a node was offered per second (the traffic's rate).
    offered_per_sec_per_node: f64,
    redis_calls_per_1000: f64,
    /// Steady state: after the first period, before node 0 is killed.
    max_over_admitted: u64,
    max_over_admitted_pct: f64,
    max_under_admitted: u64,
    max_under_admitted_pct: f64,
    /// The most units admitted beyond the limit's ceiling over the whole run: for a
    /// bucket, capacity plus refill since the start (cumulative); for a window, its limit.
    ceiling_exceeded: u64,
    /// From the kill to the join, and from the join to the end.
    kill: Errors,
    join: Errors,
    periods: Vec<PeriodRow>,
}

pub fn run(args: FleetArgs) -> Result<std::process::ExitCode, Failure> {
    let loaded = args.target.policy.load()?;
    let (policy, name) = (&loaded.policy, &loaded.name);
    let config = settings(&args, policy)?;
    with_algorithm(&loaded.built, name, |validate| validate(&config))?.map_err(bad)?;
    let backend = Backend::new(&args.target.backend.backend, None).map_err(bad)?;
    let Backend::Redis(target) = backend else {
        return Err(bad(
            "a fleet shares its limit through Redis: give --backend redis://HOST:PORT".into(),
        ));
    };
    let RedisTarget::Server(client) = *target else {
        return Err(bad(
            "this command's nodes connect to one Redis server: give --backend redis://HOST:PORT, not a Sentinel URL".into(),
        ));
    };
    let period = policy.period();
    let duration = args.duration.0;
    if args.nodes == 0 || args.nodes > 64 {
        return Err(bad(format!("--nodes must be 1..=64, got {}", args.nodes)));
    }
    if period == 0 || duration < 5 * period || duration / period > 10_000 {
        return Err(bad(format!(
            "--duration {} must hold 5 to 10 000 periods of the policy ({})",
            human(duration),
            human(period)
        )));
    }
    let periods = duration / period;
    let duration = periods * period;
    // The run starts on a period boundary at least 500 ms away (processes start meanwhile).
    let start = (wall() + 500_000).div_ceil(period) * period;
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let key_prefix = format!(
        "{}fleet-{}-{nanos}:",
        args.target.backend.prefix,
        std::process::id()
    );
    let interval = config.interval();
    let exe = std::env::current_exe()
        .map_err(|e| Failure::Backend(format!("cannot find this program: {e}")))?;
    let spawn = |index: u64, from: Ticks| -> Result<Child, Failure> {
        let mut command = Command::new(&exe);
        command
            .arg("fleet-node")
            .args(policy_flags(policy))
            .args([
                "--url",
                &args.target.backend.backend,
                "--key-prefix",
                &key_prefix,
            ])
            .args(["--mode", config.mode.name()])
            .args(["--max-batch", &config.max_batch.to_string()])
            .args(["--interval-us", &interval.as_micros().to_string()])
            .args(["--traffic", &args.traffic.to_string()])
            .args([
                "--start-us",
                &start.to_string(),
                "--duration-us",
                &duration.to_string(),
            ])
            .args([
                "--from-us",
                &from.to_string(),
                "--index",
                &index.to_string(),
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        command
            .spawn()
            .map_err(|e| Failure::Backend(format!("cannot start a node: {e}")))
    };
    let lines: Arc<Mutex<Vec<(u64, Line)>>> = Arc::default();
    let mut children = Vec::new();
    let mut readers = Vec::new();
    let mut collect = |index: u64, child: &mut Child| {
        if let Some(stdout) = child.stdout.take() {
            let lines = lines.clone();
            readers.push(std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    if let Ok(parsed) = serde_json::from_str::<Line>(&line) {
                        lines
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push((index, parsed));
                    }
                }
            }));
        }
    };
    for index in 0..args.nodes {
        let mut child = spawn(index, 0)?;
        collect(index, &mut child);
        children.push(child);
    }
    // Node 0 is killed at 40% of the run, one node joins at 70%, on period boundaries.
    let kill_period = (periods * 2 / 5).max(2);
    let join_period = (periods * 7 / 10).max(kill_period + 1);
    let sleep_until = |at: Ticks| {
        let now = wall();
        if at > now {
            std::thread::sleep(Duration::from_micros(at - now));
        }
    };
    // A tenth of a period in, so node 0 has reported the period before.
    sleep_until(start + kill_period * period + period / 10);
    let _ = children[0].kill();
    // Started ahead, the node offers traffic from the period's start.
    sleep_until((start + join_period * period).saturating_sub(300_000));
    let mut joined = spawn(args.nodes, join_period * period)?;
    collect(args.nodes, &mut joined);
    children.push(joined);
    for child in &mut children {
        let _ = child.wait();
    }
    for reader in readers {
        let _ = reader.join();
    }
    let lines = Arc::try_unwrap(lines)
        .map(|m| m.into_inner().unwrap_or_else(|e| e.into_inner()))
        .unwrap_or_default();
    // Clean up the run's keys.
    if let Ok(mut con) = client.get_connection() {
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{key_prefix}*"))
            .query(&mut con)
            .unwrap_or_default();
        if !keys.is_empty() {
            let _: Result<(), _> = redis::cmd("DEL").arg(&keys).query(&mut con);
        }
    }
    let report = measure(
        &args,
        policy,
        &loaded.built,
        config.mode,
        periods,
        (kill_period, join_period),
        &lines,
    );
    if let Some(file) = &args.chart {
        let bins: Vec<(u64, u64)> = report
            .periods
            .iter()
            .map(|p| (p.admitted, p.offered - p.admitted))
            .collect();
        let title = format!(
            "fleet {}: {} nodes × {}; node 0 killed at {}, one joins at {}",
            config.mode,
            args.nodes,
            args.traffic,
            human(kill_period * period),
            human(join_period * period)
        );
        let svg = chart::svg(&chart::Chart {
            title: &title,
            duration,
            bin: period,
            bins: &bins,
            limit_per_bin: chart::limit_per_bin(policy, period, 1),
        });
        std::fs::write(file, svg)
            .map_err(|e| Failure::Output(format!("cannot write {file}: {e}")))?;
    }
    let mut out = std::io::stdout().lock();
    if args.json {
        let text = serde_json::to_string(&report).map_err(|e| Failure::Output(e.to_string()))?;
        writeln!(out, "{text}").map_err(output)?;
    } else {
        print_report(&mut out, &report, name).map_err(output)?;
    }
    Ok(std::process::ExitCode::SUCCESS)
}

/// The policy as the flags a node reads it from.
fn policy_flags(policy: &Policy) -> Vec<String> {
    let mut flags = vec!["--algorithm".to_owned(), policy.algorithm.name().to_owned()];
    for (flag, value) in [
        ("--limit", policy.limit),
        ("--capacity", policy.capacity),
        ("--rate", policy.rate),
    ] {
        if let Some(value) = value {
            flags.extend([flag.to_owned(), value.to_string()]);
        }
    }
    flags.extend(["--period".to_owned(), format!("{}us", policy.period())]);
    flags
}

#[allow(clippy::cast_precision_loss)]
fn measure(
    args: &FleetArgs,
    policy: &Policy,
    built: &Built,
    mode: FleetMode,
    periods: u64,
    (kill, join): (u64, u64),
    lines: &[(u64, Line)],
) -> Report {
    let count = usize::try_from(periods).unwrap_or(0);
    let (mut admitted, mut offered) = (vec![0u64; count], vec![0u64; count]);
    let mut last: std::collections::BTreeMap<u64, &Line> = std::collections::BTreeMap::new();
    for (node, line) in lines {
        if let Ok(k) = usize::try_from(line.period) {
            if k < count {
                admitted[k] += line.admitted;
                offered[k] += line.admitted + line.denied;
            }
        }
        let entry = last.entry(*node).or_insert(line);
        if line.decisions >= entry.decisions {
            *entry = line;
        }
    }
    let calls: u64 = last.values().map(|l| l.calls).sum();
    let decisions: u64 = last.values().map(|l| l.decisions).sum();
    let busy: u64 = last.values().map(|l| l.busy_ns).sum();
    // Each period's allowance: a window's limit; a bucket's saved tokens plus refill.
    let (saved, refill, cap) = match built {
        Built::Rule(AnyAlgorithm::TokenBucket(b)) => {
            let p = b.params();
            (p.capacity, p.rate, Some(p.capacity))
        }
        _ => (0, policy.limit(), None),
    };
    // What one exact limiter could have admitted in each period, given what the fleet
    // admitted before: a bucket's saved tokens (it starts full; unused allowance is
    // saved, up to its capacity) plus one period's refill; a window's limit.
    let mut level = saved;
    let rows: Vec<PeriodRow> = (0..count)
        .map(|k| {
            let allowance = if cap.is_some() {
                level + refill
            } else {
                refill
            };
            if let Some(cap) = cap {
                level = allowance.saturating_sub(admitted[k]).min(cap);
            }
            PeriodRow {
                period: k as u64,
                offered: offered[k],
                admitted: admitted[k],
                allowance,
            }
        })
        .collect();
    let errors = |range: std::ops::Range<u64>| {
        let mut e = Errors::default();
        for row in rows.iter().filter(|r| range.contains(&r.period)) {
            e.periods += 1;
            let over = row.admitted.saturating_sub(row.allowance);
            // Under: below what an exact limiter admits at least under the same demand,
            // one period's refill (saved tokens are its option, not its duty).
            let under = row.offered.min(refill).saturating_sub(row.admitted);
            let pct = |units: u64| 100.0 * units as f64 / refill.max(1) as f64;
            if over > e.max_over_admitted {
                (e.max_over_admitted, e.max_over_admitted_pct) = (over, pct(over));
            }
            if under > e.max_under_admitted {
                (e.max_under_admitted, e.max_under_admitted_pct) = (under, pct(under));
            }
        }
        e
    };
    // The ceiling: a bucket never admits more than its capacity plus its refill since
    // the start; a window never more than its limit.
    let mut total = 0u64;
    let ceiling_exceeded = rows
        .iter()
        .map(|row| match cap {
            Some(cap) => {
                total += row.admitted;
                total.saturating_sub(cap + refill * (row.period + 1))
            }
            None => row.admitted.saturating_sub(refill),
        })
        .max()
        .unwrap_or(0);
    let steady = errors(1..kill);
    let seconds = args.duration.0 as f64 / 1e6;
    Report {
        mode: mode.name().to_owned(),
        nodes: args.nodes,
        traffic: args.traffic.to_string(),
        duration_us: periods * policy.period(),
        period_us: policy.period(),
        decisions_per_sec_per_node: if busy == 0 {
            0.0
        } else {
            decisions as f64 * 1e9 / busy as f64
        },
        offered_per_sec_per_node: args.traffic.expected(args.duration.0) as f64 / seconds,
        redis_calls_per_1000: if decisions == 0 {
            0.0
        } else {
            calls as f64 * 1000.0 / decisions as f64
        },
        max_over_admitted: steady.max_over_admitted,
        max_over_admitted_pct: steady.max_over_admitted_pct,
        max_under_admitted: steady.max_under_admitted,
        max_under_admitted_pct: steady.max_under_admitted_pct,
        ceiling_exceeded,
        kill: errors(kill..join),
        join: errors(join..periods),
        periods: rows,
    }
}

fn print_report(out: &mut impl Write, r: &Report, name: &str) -> std::io::Result<()> {
    writeln!(
        out,
        "fleet {} of {} nodes × {}, policy {name}, {} periods of {}",
        r.mode,
        r.nodes,
        r.traffic,
        r.periods.len(),
        human(r.period_us)
    )?;
    writeln!(
        out,
        "decisions per second per node (while deciding): {:.0}",
        r.decisions_per_sec_per_node
    )?;
    writeln!(
        out,
        "redis calls per 1000 decisions: {:.2}",
        r.redis_calls_per_1000
    )?;
    let line = |out: &mut dyn Write, what: &str, o: u64, op: f64, u: u64, up: f64| {
        writeln!(
            out,
            "{what}: max over-admitted {o} ({op:.1}%), max under-admitted {u} ({up:.1}%)"
        )
    };
    writeln!(
        out,
        "units beyond the ceiling over the run: {}",
        r.ceiling_exceeded
    )?;
    line(
        out,
        "steady state",
        r.max_over_admitted,
        r.max_over_admitted_pct,
        r.max_under_admitted,
        r.max_under_admitted_pct,
    )?;
    line(
        out,
        "node 0 killed",
        r.kill.max_over_admitted,
        r.kill.max_over_admitted_pct,
        r.kill.max_under_admitted,
        r.kill.max_under_admitted_pct,
    )?;
    line(
        out,
        "a node joined",
        r.join.max_over_admitted,
        r.join.max_over_admitted_pct,
        r.join.max_under_admitted,
        r.join.max_under_admitted_pct,
    )?;
    writeln!(out, "period  offered  admitted  allowance")?;
    for p in &r.periods {
        writeln!(
            out,
            "{:>6}  {:>7}  {:>8}  {:>9}",
            p.period, p.offered, p.admitted, p.allowance
        )?;
    }
    Ok(())
}
