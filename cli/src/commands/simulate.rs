//! `sluicegate simulate`: synthetic traffic offered to a policy on a simulated clock; a
//! summary of what was admitted, and a chart.

mod stats;

use std::io::{BufWriter, IsTerminal, Write};
use std::process::ExitCode;

use clap::Args;
use sluicegate_core::{Request, Ticks};

use crate::args::{BackendArgs, PolicyArgs};
use crate::chart;
use crate::failure::{output, Failure};
use crate::output::write_rows;
use crate::rates::Rates;
use crate::traffic::Traffic;
use sluicegate_policy::{human, Policy, PolicyDuration};

#[derive(Debug, Args)]
pub struct SimulateArgs {
    #[command(flatten)]
    policy: PolicyArgs,
    /// steady:rate=R | poisson:rate=R,seed=S | burst:size=N,every=D; add keys=K, cost=C.
    /// At most 10 000 000 requests per run.
    #[arg(long)]
    traffic: Traffic,
    /// How long to simulate, e.g. 10s (more than zero).
    #[arg(long, value_parser = sluicegate_policy::parse_duration, allow_hyphen_values = true)]
    duration: PolicyDuration,
    #[command(flatten)]
    backend: BackendArgs,
    /// Write an SVG chart of admitted and denied requests over time.
    #[arg(long)]
    chart: Option<String>,
}

pub fn run(args: SimulateArgs) -> Result<ExitCode, Failure> {
    let SimulateArgs {
        policy,
        traffic,
        duration,
        backend,
        chart,
    } = args;
    let loaded = policy.load()?;
    if duration.0 == 0 {
        return Err(Failure::Input(
            "--duration must be more than 0: a simulation of no time offers nothing".into(),
        ));
    }
    let offered = traffic.expected(duration.0);
    if offered > u128::from(stats::MAX_OFFERED) {
        return Err(Failure::Input(format!(
            "--traffic {traffic} over --duration {} offers about {offered} requests, more than the {} a simulation decides; shorten --duration or lower the rate or burst size",
            human(duration.0),
            stats::MAX_OFFERED
        )));
    }
    let open = backend.open(&loaded.name, true)?;
    let rates = Rates::open(&loaded, &open)?;
    let (policy, name, duration) = (&loaded.policy, loaded.name.as_str(), duration.0);
    let period = policy.usual_period();
    let mut run = stats::Run::new(duration, chart::bin_width(duration, period));
    let mut progress = Progress::new(duration);
    for request in traffic.requests(duration) {
        if run.offered >= stats::MAX_OFFERED {
            return Err(Failure::Input(format!(
                "--traffic {} offers more than the {} requests a simulation decides; shorten --duration or lower the rate",
                traffic,
                stats::MAX_OFFERED
            )));
        }
        let key = request.key();
        let decision = rates.decide(&Request::new(&key).cost(request.cost).at(request.at))?;
        run.record(&request, &decision);
        progress.show(request.at);
    }
    progress.finish();
    if let Some(warning) = rates.warning() {
        let _ = writeln!(std::io::stderr(), "sluicegate: {warning}");
    }
    let summary = run.summary(period);
    let mut out = BufWriter::new(std::io::stdout().lock());
    let about = [&policy.description, &policy.owner]
        .iter()
        .filter(|s| !s.is_empty())
        .map(|s| s.as_str())
        .collect::<Vec<_>>()
        .join(", owner ");
    let share = |part: u64| {
        let tenths = (u128::from(part) * 1000 + u128::from(summary.offered) / 2)
            / u128::from(summary.offered.max(1));
        format!("{}.{}%", tenths / 10, tenths % 10)
    };
    let window = human(period);
    let mut rows = vec![
        (
            "policy".to_owned(),
            format!("{} ({})", name, describe(policy)),
        ),
        ("about".to_owned(), about),
        ("backend".to_owned(), open.backend.describe()),
        (
            "offered".to_owned(),
            format!("{} over {}", summary.offered, human(duration)),
        ),
        (
            "admitted".to_owned(),
            format!("{} ({})", summary.admitted, share(summary.admitted)),
        ),
        (
            "denied".to_owned(),
            format!("{} ({})", summary.denied, share(summary.denied)),
        ),
        (
            format!("most units acting in any {window}, one key"),
            summary.max_one_key.to_string(),
        ),
        (
            format!("most units acting in any {window}, all keys"),
            summary.max_all_keys.to_string(),
        ),
        (
            "delay p50 / p90 / p99 / max".to_owned(),
            summary.delays.map(human).join(" / "),
        ),
    ];
    rows.retain(|(_, value)| !value.is_empty());
    if let Some(path) = chart.as_deref() {
        let title = format!("{}: {}", name, describe(policy));
        let svg = chart::svg(&chart::Chart {
            title: &title,
            duration,
            bin: run.bin,
            bins: &run.bins,
            limit_per_bin: chart::limit_per_bin(policy, run.bin, traffic.keys()),
        });
        std::fs::write(path, svg)
            .map_err(|e| Failure::Output(format!("cannot write {path}: {e}")))?;
        rows.push(("chart".to_owned(), path.to_owned()));
    }
    write_rows(&mut out, &rows).map_err(output)?;
    out.flush().map_err(output)?;
    Ok(ExitCode::SUCCESS)
}

fn describe(policy: &Policy) -> String {
    let kind = policy.algorithm.name();
    let period = policy.period_words();
    let text = match (policy.limit, policy.capacity, policy.rate, &policy.limits) {
        (_, _, _, Some(members)) => {
            let members: Vec<String> = members.iter().map(describe).collect();
            format!("{kind} of {}", members.join("; "))
        }
        (Some(limit), _, _, _) => format!("{kind}, {limit} per {period}"),
        (_, Some(capacity), Some(rate), _) => {
            format!("{kind}, capacity {capacity}, {rate} per {period}")
        }
        _ => kind.to_owned(),
    };
    match policy.ban {
        Some(ban) => format!(
            "{text}, banned {} after more than {} denied in {}",
            human(ban.duration.0),
            ban.threshold,
            human(ban.window.0)
        ),
        None => text,
    }
}

/// A progress bar on stderr, only when it is a terminal.
struct Progress {
    total: Ticks,
    shown: u64,
    enabled: bool,
}

impl Progress {
    fn new(total: Ticks) -> Self {
        Self {
            total: total.max(1),
            shown: 0,
            enabled: std::io::stderr().is_terminal(),
        }
    }

    fn show(&mut self, at: Ticks) {
        let percent = u64::try_from(u128::from(at) * 100 / u128::from(self.total)).unwrap_or(100);
        if self.enabled && percent > self.shown {
            self.shown = percent;
            let filled = usize::try_from(percent / 2).unwrap_or(50);
            let _ = write!(
                std::io::stderr(),
                "\r[{:<50}] {percent:>3}% simulated",
                "#".repeat(filled)
            );
        }
    }

    fn finish(&self) {
        if self.enabled && self.shown > 0 {
            let _ = write!(std::io::stderr(), "\r{:<70}\r", "");
        }
    }
}
