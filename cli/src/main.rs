//! `tollgate`: simulate, replay and inspect rate limits on any host.
//!
//! Exit codes: 0 success (for `check`: admitted), 1 `check` denied, 2 bad flags or
//! input (a message says what and where), 3 the policy does not serve this `--app`,
//! 4 the backend failed.

mod backend;
mod chart;
mod policy;
mod traffic;

use std::fmt::Debug;
use std::io::{BufWriter, IsTerminal, Write};
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use serde::Serialize;
use tollgate_core::{Clock, Decision, MonotonicClock, Ticks};

use backend::{Backend, Hosted, Store};
use policy::{Duration, Job, Kind, Limiter, Policy};
use traffic::Traffic;

#[derive(Debug, Parser)]
#[command(
    name = "tollgate",
    version,
    about = "Simulate, replay and inspect rate limits on any tollgate host"
)]
#[command(
    after_help = "Exit codes: 0 success (check: admitted), 1 check denied, 2 bad flags or input, 3 no such policy for this app, 4 backend failure."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Offer synthetic traffic to a policy on a simulated clock; print a summary, chart it.
    Simulate {
        #[command(flatten)]
        policy: PolicyArgs,
        /// steady:rate=R | poisson:rate=R,seed=S | burst:size=N,every=D; add keys=K, cost=C.
        #[arg(long)]
        traffic: Traffic,
        /// How long to simulate, e.g. 10s.
        #[arg(long, value_parser = policy::parse_duration)]
        duration: Duration,
        #[command(flatten)]
        backend: BackendArgs,
        /// Write an SVG chart of admitted and denied requests over time.
        #[arg(long)]
        chart: Option<String>,
    },
    /// Decide a CSV trace (header t_us,key,cost) and print one JSON line per request.
    Replay {
        /// The trace; t_us must not decrease.
        #[arg(long)]
        trace: String,
        #[command(flatten)]
        policy: PolicyArgs,
        #[command(flatten)]
        backend: BackendArgs,
    },
    /// Decide one request for KEY now (or at --now) and print the decision.
    Check(KeyArgs),
    /// What a request for KEY would get, changing nothing.
    Peek(KeyArgs),
    /// Forget KEY's state.
    Reset(KeyArgs),
    /// Print KEY's stored state, decoded.
    Inspect(KeyArgs),
}

#[derive(Debug, Args)]
struct PolicyArgs {
    /// A TOML file of policies.
    #[arg(long, requires = "policy")]
    config: Option<String>,
    /// The policy's name in --config.
    #[arg(long, requires = "config")]
    policy: Option<String>,
    /// The application asking (checked against the policy's `apps`).
    #[arg(long)]
    app: Option<String>,
    /// Instead of --config: the algorithm.
    #[arg(long, conflicts_with = "config", required_unless_present = "config")]
    algorithm: Option<Kind>,
    /// Windows: units per period.
    #[arg(long)]
    limit: Option<u64>,
    /// Buckets: the most units held.
    #[arg(long)]
    capacity: Option<u64>,
    /// Buckets: units refilled or leaked per period.
    #[arg(long)]
    rate: Option<u64>,
    /// The period, e.g. 1s, 250ms, 1500us.
    #[arg(long, value_parser = policy::parse_duration)]
    period: Option<Duration>,
}

#[derive(Debug, Args)]
struct BackendArgs {
    /// memory, sled:PATH or a redis:// URL (redis://HOST:PORT/DB).
    #[arg(long, default_value = "memory")]
    backend: Backend,
}

#[derive(Debug, Args)]
struct KeyArgs {
    key: String,
    #[command(flatten)]
    policy: PolicyArgs,
    #[command(flatten)]
    backend: BackendArgs,
    /// The request's cost.
    #[arg(long, default_value_t = 1)]
    cost: u64,
    /// Decide at this time (µs since the Unix epoch) instead of now.
    #[arg(long)]
    now: Option<Ticks>,
}

/// Why a command failed, and its exit code.
#[derive(Debug)]
pub enum Failure {
    Input(String),
    NoPolicyForApp(String),
    Backend(String),
}

/// A message about bad input.
impl From<String> for Failure {
    fn from(message: String) -> Self {
        Self::Input(message)
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli.command) {
        Ok(code) => code,
        Err(failure) => {
            let (code, message) = match failure {
                Failure::Input(m) => (2, m),
                Failure::NoPolicyForApp(m) => (3, m),
                Failure::Backend(m) => (4, m),
            };
            eprintln!("tollgate: {message}");
            ExitCode::from(code)
        }
    }
}

fn run(command: Command) -> Result<ExitCode, Failure> {
    match command {
        Command::Simulate {
            policy,
            traffic,
            duration,
            backend,
            chart,
        } => {
            let (policy, limiter, name) = policy.load()?;
            limiter.run(Simulate {
                policy: &policy,
                name,
                traffic: &traffic,
                duration: duration.0,
                backend: &backend.backend,
                chart: chart.as_deref(),
            })
        }
        Command::Replay {
            trace,
            policy,
            backend,
        } => {
            let (_, limiter, _) = policy.load()?;
            limiter.run(Replay {
                trace: &trace,
                backend: &backend.backend,
            })
        }
        Command::Check(args) => args.run(Action::Check),
        Command::Peek(args) => args.run(Action::Peek),
        Command::Reset(args) => args.run(Action::Reset),
        Command::Inspect(args) => args.run(Action::Inspect),
    }
}

impl PolicyArgs {
    /// The policy from --config/--policy or from the algorithm flags, if this app may use it.
    fn load(&self) -> Result<(Policy, Limiter, String), Failure> {
        let ((policy, limiter), name) = match (&self.config, &self.policy, self.algorithm) {
            (Some(config), Some(name), _) => (policy::load(config, name)?, name.clone()),
            (_, _, Some(kind)) => {
                let period = self
                    .period
                    .ok_or_else(|| Failure::Input("--algorithm needs --period".into()))?;
                (
                    Policy::from_flags(kind, self.limit, self.capacity, self.rate, period)?,
                    "(flags)".into(),
                )
            }
            _ => {
                return Err(Failure::Input(
                    "give --config and --policy, or --algorithm".into(),
                ))
            }
        };
        if !policy.admits_app(self.app.as_deref()) {
            return Err(Failure::NoPolicyForApp(format!(
                "no such policy for this app: {name:?} serves {}, not {}",
                policy.apps.join(", "),
                self.app
                    .as_deref()
                    .map_or("an unnamed app".into(), |a| format!("{a:?}"))
            )));
        }
        Ok((policy, limiter, name))
    }
}

/// One decision as a JSON line: replay's output format.
#[derive(Debug, Serialize)]
struct Record<'a> {
    t_us: Ticks,
    key: &'a str,
    cost: u64,
    allowed: bool,
    limit: u64,
    remaining: u64,
    retry_after_us: Option<Ticks>,
    reset_after_us: Ticks,
    delay_us: Ticks,
}

impl<'a> Record<'a> {
    fn new(t_us: Ticks, key: &'a str, cost: u64, d: &Decision) -> Self {
        Self {
            t_us,
            key,
            cost,
            allowed: d.allowed,
            limit: d.limit,
            remaining: d.remaining,
            retry_after_us: d.retry_after.filter(|_| !d.allowed),
            reset_after_us: d.reset_after,
            delay_us: d.delay,
        }
    }

    fn write(&self, out: &mut impl Write) -> Result<(), Failure> {
        serde_json::to_writer(&mut *out, self).map_err(|e| Failure::Input(e.to_string()))?;
        writeln!(out).map_err(|e| Failure::Input(e.to_string()))
    }
}

#[derive(Debug, Clone, Copy)]
enum Action {
    Check,
    Peek,
    Reset,
    Inspect,
}

impl KeyArgs {
    fn run(self, action: Action) -> Result<ExitCode, Failure> {
        let (_, limiter, _) = self.policy.load()?;
        limiter.run(OnKey {
            args: &self,
            action,
        })
    }
}

struct OnKey<'a> {
    args: &'a KeyArgs,
    action: Action,
}

impl Job for OnKey<'_> {
    type Output = Result<ExitCode, Failure>;
    fn run<A>(self, algorithm: A) -> Self::Output
    where
        A: Hosted,
        A::State: Debug + Send,
    {
        let args = self.args;
        let store = args.backend.backend.open(algorithm.clone())?;
        let now = args.now.unwrap_or_else(|| MonotonicClock.now());
        let mut out = std::io::stdout().lock();
        match self.action {
            Action::Check | Action::Peek => {
                let decision = if matches!(self.action, Action::Check) {
                    store.decide(&args.key, now, args.cost)?
                } else {
                    store.peek(&args.key, now, args.cost)?
                };
                Record::new(now, &args.key, args.cost, &decision).write(&mut out)?;
                Ok(ExitCode::from(u8::from(!decision.allowed)))
            }
            Action::Reset => {
                store.reset(&args.key)?;
                Ok(ExitCode::SUCCESS)
            }
            Action::Inspect => {
                match store.state(&args.key)? {
                    None => println!("{}: fresh (no stored state)", args.key),
                    Some(state) => {
                        let bytes: String = algorithm
                            .encode_to_vec(&state)
                            .iter()
                            .map(|b| format!("{b:02x}"))
                            .collect();
                        println!("{}: {state:?}\nencoded: {bytes}", args.key);
                    }
                }
                Ok(ExitCode::SUCCESS)
            }
        }
    }
}

struct Replay<'a> {
    trace: &'a str,
    backend: &'a Backend,
}

impl Job for Replay<'_> {
    type Output = Result<ExitCode, Failure>;
    fn run<A>(self, algorithm: A) -> Self::Output
    where
        A: Hosted,
        A::State: Debug + Send,
    {
        let store = self.backend.open(algorithm)?;
        let mut reader = csv::Reader::from_path(self.trace)
            .map_err(|e| Failure::Input(format!("{}: {e}", self.trace)))?;
        let headers = reader
            .headers()
            .map_err(|e| Failure::Input(format!("{}: {e}", self.trace)))?;
        if headers != vec!["t_us", "key", "cost"] {
            return Err(Failure::Input(format!(
                "{}:1: the header must be t_us,key,cost",
                self.trace
            )));
        }
        let mut out = BufWriter::new(std::io::stdout().lock());
        let mut last = 0;
        for row in reader.records() {
            let row = row.map_err(|e| Failure::Input(format!("{}: {e}", self.trace)))?;
            let line = row.position().map_or(0, |p| p.line());
            let bad = |what: &str| Failure::Input(format!("{}:{line}: {what}", self.trace));
            let t_us: Ticks = row[0]
                .trim()
                .parse()
                .map_err(|_| bad("t_us must be a whole number of microseconds"))?;
            let cost: u64 = row[2]
                .trim()
                .parse()
                .map_err(|_| bad("cost must be a whole number"))?;
            if t_us < last {
                return Err(bad("t_us goes backwards"));
            }
            last = t_us;
            let decision = store.decide(&row[1], t_us, cost)?;
            Record::new(t_us, &row[1], cost, &decision).write(&mut out)?;
        }
        out.flush().map_err(|e| Failure::Input(e.to_string()))?;
        Ok(ExitCode::SUCCESS)
    }
}

struct Simulate<'a> {
    policy: &'a Policy,
    name: String,
    traffic: &'a Traffic,
    duration: Ticks,
    backend: &'a Backend,
    chart: Option<&'a str>,
}

/// Columns in the chart.
const COLUMNS: u64 = 60;

impl Job for Simulate<'_> {
    type Output = Result<ExitCode, Failure>;
    fn run<A>(self, algorithm: A) -> Self::Output
    where
        A: Hosted,
        A::State: Debug + Send,
    {
        let store: Box<dyn Store<A>> = self.backend.open(algorithm)?;
        let duration = self.duration.max(1);
        let mut columns = vec![(0u64, 0u64); usize::try_from(COLUMNS).unwrap_or(60)];
        let mut admitted_at: Vec<(Ticks, u64)> = Vec::new();
        let mut delays: Vec<Ticks> = Vec::new();
        let (mut offered, mut denied) = (0u64, 0u64);
        let mut progress = Progress::new(duration);
        for request in self.traffic.requests(duration) {
            let decision = store.decide(&request.key, request.at, request.cost)?;
            offered += 1;
            let column = usize::try_from(
                u128::from(request.at) * u128::from(COLUMNS) / u128::from(duration),
            )
            .unwrap_or(0);
            if decision.allowed {
                columns[column].0 += 1;
                // When it acts: a paced request acts after its delay.
                admitted_at.push((request.at.saturating_add(decision.delay), request.cost));
                delays.push(decision.delay);
            } else {
                columns[column].1 += 1;
                denied += 1;
            }
            progress.show(request.at);
        }
        progress.finish();
        delays.sort_unstable();
        admitted_at.sort_unstable();
        let percentile = |p: usize| {
            delays
                .get((delays.len() * p / 100).min(delays.len().saturating_sub(1)))
                .copied()
                .unwrap_or(0)
        };
        let period = self.policy.period();
        let admitted = offered - denied;
        #[allow(clippy::cast_precision_loss)]
        let share = if offered == 0 {
            0.0
        } else {
            100.0 * admitted as f64 / offered as f64
        };
        let mut out = std::io::stdout().lock();
        let about = [&self.policy.description, &self.policy.owner]
            .iter()
            .filter(|s| !s.is_empty())
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join(", owner ");
        let rows = [
            (
                "policy",
                format!("{} ({})", self.name, describe(self.policy)),
            ),
            ("about", about),
            ("backend", format!("{:?}", self.backend).to_lowercase()),
            ("offered", offered.to_string()),
            ("admitted", format!("{admitted} ({share:.1}%)")),
            ("denied", denied.to_string()),
            (
                &*format!("most acting in any {} window", ms(period)),
                max_in_window(&admitted_at, period).to_string(),
            ),
            (
                "delay p50 / p90 / p99 / max",
                format!(
                    "{} / {} / {} / {}",
                    ms(percentile(50)),
                    ms(percentile(90)),
                    ms(percentile(99)),
                    ms(delays.last().copied().unwrap_or(0))
                ),
            ),
        ];
        for (name, value) in rows {
            writeln!(out, "{name:<36} {value}").map_err(|e| Failure::Input(e.to_string()))?;
        }
        if let Some(path) = self.chart {
            let title = format!("{}: {}", self.name, describe(self.policy));
            std::fs::write(path, chart::svg(&title, duration, &columns))
                .map_err(|e| Failure::Input(format!("cannot write {path}: {e}")))?;
            writeln!(out, "{:<36} {path}", "chart").map_err(|e| Failure::Input(e.to_string()))?;
        }
        Ok(ExitCode::SUCCESS)
    }
}

fn describe(policy: &Policy) -> String {
    let kind = policy.algorithm.name();
    match (policy.limit, policy.capacity, policy.rate) {
        (Some(limit), _, _) => format!("{kind}, {limit} per {}", ms(policy.period())),
        (_, Some(capacity), Some(rate)) => format!(
            "{kind}, capacity {capacity}, {rate} per {}",
            ms(policy.period())
        ),
        _ => kind,
    }
}

/// A duration for people: `1500 ms`, `2.5 ms`, `0 ms`.
fn ms(ticks: Ticks) -> String {
    if ticks.is_multiple_of(1000) {
        format!("{} ms", ticks / 1000)
    } else {
        format!("{}.{:03} ms", ticks / 1000, ticks % 1000)
    }
}

/// The most cost acting within any `period` ticks (`at` in time order).
fn max_in_window(admitted: &[(Ticks, u64)], period: Ticks) -> u64 {
    let (mut start, mut sum, mut best) = (0, 0, 0);
    for &(at, cost) in admitted {
        sum += cost;
        while admitted[start].0 + period <= at {
            sum -= admitted[start].1;
            start += 1;
        }
        best = best.max(sum);
    }
    best
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
            total,
            shown: 0,
            enabled: std::io::stderr().is_terminal(),
        }
    }

    fn show(&mut self, at: Ticks) {
        let percent = u64::try_from(u128::from(at) * 100 / u128::from(self.total)).unwrap_or(100);
        if self.enabled && percent > self.shown {
            self.shown = percent;
            let filled = usize::try_from(percent / 2).unwrap_or(50);
            eprint!("\r[{:<50}] {percent:>3}%", "#".repeat(filled));
        }
    }

    fn finish(&self) {
        if self.enabled && self.shown > 0 {
            eprintln!("\r{:<58}\r", "");
        }
    }
}
