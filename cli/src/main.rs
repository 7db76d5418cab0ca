//! `tollgate`: simulate, replay and inspect rate limits on any host.
//!
//! Exit codes: 0 success (check: admitted; lock and lease: done), 1 check denied, or a
//! lock or lease held by another owner (acquire) or not held by this owner (release,
//! renew), 2 bad flags or input, 3 no such policy for this app, 4 backend failure
//! (unreachable, a sled database in use, or a key holding something tollgate cannot
//! read, left as it is), 5 the output could not be written, 6 TLS refused (the Redis
//! server's certificate is not signed by a trusted CA, or names another host). Exit code
//! 5 has no message for a closed pipe.

mod backend;
mod chart;
mod fleet;
mod lease;
mod policy;
mod remote;
mod serve;
mod stats;
mod traffic;

use std::fmt::Debug;
use std::io::{BufWriter, IsTerminal, Read, Write};
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use serde::Serialize;
use tollgate_core::{check_now, Clock, Decision, MonotonicClock, Ticks, MAX_TICKS};

use backend::{Backend, Hosted, Open, SledDurability, Store};
use policy::{human, list, Duration, Job, Kind, Limiter, Policy, Style};
use traffic::Traffic;

#[derive(Debug, Parser)]
#[command(
    name = "tollgate",
    version,
    about = "Simulate, replay and inspect rate limits on any tollgate host"
)]
#[command(
    after_help = "Exit codes: 0 success (check: admitted; lock and lease: done), 1 check denied, or a lock or lease held by another owner (acquire) or not held by this owner (release, renew), 2 bad flags or input, 3 no such policy for this app, 4 backend failure (unreachable, a sled database in use, or a key holding something tollgate cannot read, left as it is), 5 the output could not be written, 6 TLS refused (the Redis server's certificate is not signed by a trusted CA, or names another host)."
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
        /// At most 10 000 000 requests per run.
        #[arg(long)]
        traffic: Traffic,
        /// How long to simulate, e.g. 10s (more than zero).
        #[arg(long, value_parser = policy::parse_duration, allow_hyphen_values = true)]
        duration: Duration,
        #[command(flatten)]
        backend: BackendArgs,
        /// Write an SVG chart of admitted and denied requests over time.
        #[arg(long)]
        chart: Option<String>,
    },
    /// Decide a CSV trace (header t_us,key,cost) and print one JSON line per request.
    Replay {
        /// The trace, or - for standard input; t_us must not decrease.
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
    /// Delete every state of the policy in its namespace (PREFIX + policy + ":"), e.g.
    /// after a replay or `check --now`, whose states on Redis never expire. Keys holding
    /// anything else are kept.
    Purge {
        #[command(flatten)]
        policy: PolicyArgs,
        #[command(flatten)]
        backend: BackendArgs,
    },
    /// Locks: one holder at a time, reentrant, with fencing tokens (on sled or Redis).
    #[command(subcommand)]
    Lock(lease::LockCommand),
    /// Leases of a concurrency policy: at most `limit` held at once (on sled or Redis).
    #[command(subcommand)]
    Lease(lease::LeaseCommand),
    /// Measure a fleet mode: N node processes share the policy through Redis; prints
    /// decisions per second per node, Redis calls per 1000 decisions and the over- and
    /// under-admission per period, also with a node killed and one joining mid-run.
    Fleet(fleet::FleetArgs),
    /// One node of `tollgate fleet` (started by it).
    #[command(hide = true)]
    FleetNode(fleet::NodeArgs),
    /// Print KEY's stored state in the policy's units (--json for JSON); for a
    /// concurrency policy its holders, their expiries and the last fencing token.
    Inspect {
        #[command(flatten)]
        key: KeyArgs,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Run the rate-limit service: policies, apps and users in a database, decisions
    /// over HTTP (see server/API.md); --init-admin prints the first admin's token.
    Serve(serve::ServeArgs),
    /// Manage the policies of a `tollgate serve` (list, show, apply a policy file,
    /// delete) with a user token, for scripts and CI.
    #[command(subcommand)]
    Policy(remote::PolicyCommand),
}

/// The algorithms `--algorithm` takes (leases and composites need a policy file).
const RATE_KINDS: [Kind; 6] = [
    Kind::FixedWindow,
    Kind::SlidingLog,
    Kind::SlidingCounter,
    Kind::TokenBucket,
    Kind::LeakyBucket,
    Kind::LeakyPacing,
];

#[derive(Debug, Args)]
struct PolicyArgs {
    /// A TOML file of policies (with --policy).
    #[arg(long)]
    config: Option<String>,
    /// The policy's name in --config.
    #[arg(long)]
    policy: Option<String>,
    /// The application asking (checked against the policy's `apps`).
    #[arg(long)]
    app: Option<String>,
    /// Instead of --config: the algorithm; windows take --limit and --period, buckets
    /// --capacity, --rate and --period.
    #[arg(long, value_parser = clap::builder::TypedValueParser::try_map(clap::builder::PossibleValuesParser::new(RATE_KINDS.map(Kind::name)), |s| s.parse::<Kind>()))]
    algorithm: Option<Kind>,
    /// Windows: units per period.
    #[arg(long, value_parser = whole, allow_negative_numbers = true)]
    limit: Option<u64>,
    /// Buckets: the most units held.
    #[arg(long, value_parser = whole, allow_negative_numbers = true)]
    capacity: Option<u64>,
    /// Buckets: units refilled or leaked per period.
    #[arg(long, value_parser = whole, allow_negative_numbers = true)]
    rate: Option<u64>,
    /// The period, e.g. 1s, 250ms, 1500us.
    #[arg(long, value_parser = policy::parse_duration, allow_hyphen_values = true)]
    period: Option<Duration>,
}

#[derive(Debug, Args)]
struct BackendArgs {
    /// memory, sled:PATH, or a Redis URL: redis://HOST:PORT/DB, or rediss://HOST:PORT/DB
    /// for TLS. A sled database is created only by commands that record decisions, and
    /// only in an existing directory.
    #[arg(long, default_value = "memory", value_parser = backend::backend_flag)]
    backend: String,
    /// rediss:// only: trust the CA certificates in this PEM file (a private CA, a
    /// managed service's) instead of the system's.
    #[arg(long, value_name = "FILE")]
    redis_ca: Option<String>,
    /// Stored keys are PREFIX + policy name + ":" + KEY (with flags instead of a policy
    /// file, the algorithm and its parameters name the policy).
    #[arg(long, default_value = "tollgate:")]
    prefix: String,
    /// sled only: every-decision flushes before each state-changing decision returns
    /// (nothing admitted is lost in a crash; one fsync each, about 11 000 decisions per
    /// second); background flushes every 500 ms (a crash forgets at most that interval).
    #[arg(long, value_enum, default_value = "every-decision")]
    durability: SledDurability,
    /// memory only: the most keys held at once. Keys whose state is fresh are dropped
    /// first; beyond this, limited keys are forgotten (with a warning).
    #[arg(long, value_parser = whole, default_value = "1000000", allow_negative_numbers = true)]
    max_keys: u64,
}

#[derive(Debug, Args)]
struct KeyArgs {
    /// The key (a user, an IP, a route); stored as PREFIX + policy + ":" + KEY.
    key: String,
    #[command(flatten)]
    policy: PolicyArgs,
    #[command(flatten)]
    backend: BackendArgs,
    /// The request's cost.
    #[arg(long, default_value_t = 1, value_parser = whole, allow_negative_numbers = true)]
    cost: u64,
    /// Decide at this time (µs since the Unix epoch, at most 2^62) instead of now.
    #[arg(long, value_parser = instant, allow_negative_numbers = true)]
    now: Option<Ticks>,
}

/// A count or a cost: a non-negative integer.
fn whole(text: &str) -> Result<u64, String> {
    text.trim()
        .parse()
        .map_err(|_| format!("must be a non-negative integer, got {text:?}"))
}

/// An instant in the core's range: 0 to `MAX_TICKS` µs, checked by the core's own
/// `check_now`, the one check every host applies to a time it is given.
fn instant(text: &str) -> Result<Ticks, String> {
    text.trim()
        .parse()
        .ok()
        .and_then(|now| check_now(now).ok())
        .ok_or_else(|| {
            format!(
                "must be a non-negative integer of µs since the Unix epoch, at most {MAX_TICKS} (2^62), got {text:?}"
            )
        })
}

/// Why a command failed, and its exit code.
#[derive(Debug)]
pub enum Failure {
    Input(String),
    NoPolicyForApp(String),
    Backend(String),
    /// Standard output or an output file could not be written (a full disk, a closed
    /// pipe): not bad input, so a code of its own.
    Output(String),
    /// A lock or lease held by others (`acquire`), or not held by the owner (`release`,
    /// `renew`): a shell script's "no", exit 1.
    Refused(String),
    /// The owner holds no lease on the key (`release`, `renew`): the caller names both.
    NotHeld,
    /// A sled database in use by another process.
    InUse(String),
    /// TLS refused: the server's certificate is not signed by a trusted CA (`--redis-ca`
    /// or the system's roots) or names another host. Retrying does not help, so not 4.
    Tls(String),
    /// Standard output is a pipe whose reader has gone (`tollgate ... | head`): exit 5
    /// without a message, as the reader asked for no more.
    ClosedPipe,
}

/// A message about bad input.
impl From<String> for Failure {
    fn from(message: String) -> Self {
        Self::Input(message)
    }
}

/// Every write of every command goes through this: one message, one exit code.
fn output(e: std::io::Error) -> Failure {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        Failure::ClosedPipe
    } else {
        Failure::Output(format!("cannot write the output: {e}"))
    }
}

fn main() -> ExitCode {
    let result = match Cli::try_parse() {
        Ok(cli) => run(cli.command),
        // Help, version and flag errors, printed by clap: its exit code (0 or 2), unless
        // printing them fails like any other output.
        Err(e) => e
            .print()
            .map_err(output)
            .map(|()| ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2))),
    };
    match result {
        Ok(code) => code,
        Err(failure) => {
            let (code, message) = match failure {
                Failure::Input(m) => (2, m),
                Failure::NoPolicyForApp(m) => (3, m),
                Failure::Refused(m) => (1, m),
                Failure::NotHeld => (1, "the owner holds no lease on this key".into()),
                Failure::Backend(m) | Failure::InUse(m) => (4, m),
                Failure::Output(m) => (5, m),
                Failure::Tls(m) => (6, m),
                Failure::ClosedPipe => return ExitCode::from(5),
            };
            let _ = writeln!(std::io::stderr(), "tollgate: {message}");
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
            loaded.limiter.run(
                Simulate {
                    policy: &loaded.policy,
                    name: &loaded.name,
                    traffic: &traffic,
                    duration: duration.0,
                    open,
                    chart: chart.as_deref(),
                },
                &loaded.name,
            )?
        }
        Command::Replay {
            trace,
            policy,
            backend,
        } => {
            let loaded = policy.load()?;
            loaded.limiter.run(
                Replay {
                    trace: &trace,
                    open: backend.open(&loaded.name, true)?,
                },
                &loaded.name,
            )?
        }
        Command::Check(args) => args.run(Action::Check),
        Command::Peek(args) => args.run(Action::Peek),
        Command::Reset(args) => args.run(Action::Reset),
        Command::Inspect { key, json } => key.run(Action::Inspect { json }),
        Command::Serve(args) => args.run(),
        Command::Policy(command) => command.run(),
        Command::Purge { policy, backend } => {
            let loaded = policy.load()?;
            loaded.limiter.run(
                Purge {
                    open: backend.open(&loaded.name, false)?,
                    name: &loaded.name,
                },
                &loaded.name,
            )?
        }
        Command::Fleet(args) => fleet::run(args),
        Command::FleetNode(args) => fleet::node(args),
        Command::Lock(command) => lease::lock(command),
        Command::Lease(command) => lease::lease(command),
    }
}

impl BackendArgs {
    /// How to open the store for policy `name`: its keys are `PREFIX name:KEY`. A CA
    /// file that cannot be read or is no PEM certificate is bad input.
    fn open(&self, name: &str, creates: bool) -> Result<Open, Failure> {
        let ca = match &self.redis_ca {
            Some(file) => Some((
                file.as_str(),
                std::fs::read(file).map_err(|e| {
                    Failure::Input(format!("--redis-ca {file}: cannot read it: {e}"))
                })?,
            )),
            None => None,
        };
        let ca = ca.as_ref().map(|(file, pem)| (*file, pem.as_slice()));
        Ok(Open {
            backend: Backend::new(&self.backend, ca)?,
            namespace: format!("{}{name}:", self.prefix),
            creates,
            durability: self.durability,
            max_keys: usize::try_from(self.max_keys).unwrap_or(usize::MAX),
            in_use_wait: std::time::Duration::ZERO,
        })
    }
}

/// A policy ready to run: what it says, its algorithm and its name.
struct Loaded {
    policy: Policy,
    limiter: Limiter,
    name: String,
}

impl PolicyArgs {
    /// The policy from --config/--policy or from the algorithm flags, if this app may use
    /// it. Everything missing is reported at once.
    fn load(&self) -> Result<Loaded, Failure> {
        let flags: Vec<String> = [
            ("--algorithm", self.algorithm.is_some()),
            ("--limit", self.limit.is_some()),
            ("--capacity", self.capacity.is_some()),
            ("--rate", self.rate.is_some()),
            ("--period", self.period.is_some()),
        ]
        .iter()
        .filter(|(_, given)| *given)
        .map(|(name, _)| (*name).to_owned())
        .collect();
        let (policy, limiter, name) = match (&self.config, &self.policy) {
            (Some(_), Some(_)) | (None, Some(_)) | (Some(_), None) if !flags.is_empty() => {
                return Err(Failure::Input(format!(
                    "give either --config FILE --policy NAME or --algorithm with its parameters, not both ({} with {})",
                    list(&flags),
                    if self.config.is_some() { "--config" } else { "--policy" }
                )))
            }
            (Some(config), Some(name)) => {
                let (policy, limiter) = policy::load(config, name)?;
                (policy, limiter, name.clone())
            }
            (None, Some(name)) => {
                return Err(Failure::Input(format!(
                    "--policy {name} needs --config FILE, the policy file that defines it"
                )))
            }
            (Some(config), None) => {
                return Err(Failure::Input(format!(
                    "--config {config} needs --policy NAME, the policy to use from it"
                )))
            }
            (None, None) => {
                let Some(kind) = self.algorithm else {
                    return Err(Failure::Input(
                        "no policy given: use --config FILE --policy NAME, or --algorithm with --limit N --period D (fixed-window, sliding-log, sliding-counter) or --capacity N --rate N --period D (token-bucket, leaky-bucket, leaky-pacing)".into(),
                    ));
                };
                let policy =
                    Policy::from_flags(kind, self.limit, self.capacity, self.rate, self.period);
                let limiter = policy::limiter(&policy, Style::Flags)
                    .map_err(|p| Failure::Input(p.message))?;
                let name = flag_name(&policy);
                (policy, limiter, name)
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
        Ok(Loaded {
            policy,
            limiter,
            name,
        })
    }
}

/// The name of a policy given by flags: its algorithm and parameters, e.g.
/// `token-bucket-10-5-1s`, so different flags never share keys.
fn flag_name(policy: &Policy) -> String {
    let numbers: Vec<String> = [policy.limit, policy.capacity, policy.rate]
        .iter()
        .flatten()
        .map(ToString::to_string)
        .collect();
    format!(
        "{}-{}-{}",
        policy.algorithm.name(),
        numbers.join("-"),
        policy::short(policy.period())
    )
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
}

/// Writes `rows` as `name  value` lines, the values aligned after the longest name:
/// what `simulate` and `inspect` print.
fn write_rows<N: AsRef<str>>(out: &mut impl Write, rows: &[(N, String)]) -> std::io::Result<()> {
    let width = rows
        .iter()
        .map(|(name, _)| name.as_ref().chars().count())
        .max()
        .unwrap_or(0);
    for (name, value) in rows {
        writeln!(out, "{:<width$}  {value}", name.as_ref())?;
    }
    Ok(())
}

/// Writes `value` as one JSON line.
fn json_line(out: &mut impl Write, value: &impl Serialize) -> Result<(), Failure> {
    serde_json::to_writer(&mut *out, value).map_err(|e| output(e.into()))?;
    writeln!(out).map_err(output)
}

#[derive(Debug, Clone, Copy)]
enum Action {
    Check,
    Peek,
    Reset,
    Inspect { json: bool },
}

impl KeyArgs {
    fn run(self, action: Action) -> Result<ExitCode, Failure> {
        let loaded = self.policy.load()?;
        let open = self
            .backend
            .open(&loaded.name, matches!(action, Action::Check))?;
        if let (Limiter::Leases { model, .. }, Action::Inspect { json }) = (&loaded.limiter, action)
        {
            return lease::inspect(lease::Inspect {
                key: &self.key,
                model: *model,
                algorithm: "concurrency",
                open,
                now: self.now,
                json,
            });
        }
        loaded.limiter.run(
            OnKey {
                args: &self,
                policy: &loaded.policy,
                open,
                action,
            },
            &loaded.name,
        )?
    }
}

struct OnKey<'a> {
    args: &'a KeyArgs,
    policy: &'a Policy,
    open: Open,
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
        let store = self.open.store(algorithm.clone())?;
        let now = args.now.unwrap_or_else(|| MonotonicClock::new().now());
        let mut out = BufWriter::new(std::io::stdout().lock());
        let code = match self.action {
            Action::Check | Action::Peek => {
                let decision = if matches!(self.action, Action::Check) {
                    store.decide(&args.key, now, args.cost)?
                } else {
                    store.peek(&args.key, now, args.cost)?
                };
                json_line(&mut out, &Record::new(now, &args.key, args.cost, &decision))?;
                ExitCode::from(u8::from(!decision.allowed))
            }
            Action::Reset => {
                store.reset(&args.key)?;
                writeln!(out, "{}: reset (its next request starts fresh)", args.key)
                    .map_err(output)?;
                ExitCode::SUCCESS
            }
            Action::Inspect { json } => {
                let state = store.state(&args.key)?;
                let view = inspect::View::new(
                    &algorithm,
                    self.policy,
                    &args.key,
                    &format!("{}{}", self.open.namespace, args.key),
                    state,
                    now,
                );
                if json {
                    json_line(&mut out, &view)?;
                } else {
                    view.write_text(&mut out).map_err(output)?;
                }
                ExitCode::SUCCESS
            }
        };
        out.flush().map_err(output)?;
        Ok(code)
    }
}

mod inspect {
    //! `inspect`: a stored state in the policy's units.

    use std::io::Write;

    use serde::Serialize;
    use tollgate_core::{Algorithm, Ticks};

    use crate::policy::{human, Kind, Policy};

    /// What `inspect` prints; `--json` prints these fields.
    #[derive(Debug, Serialize)]
    pub struct View {
        /// The key as given.
        key: String,
        /// The key in the store: the namespace and the key.
        stored_key: String,
        algorithm: String,
        /// Whether anything is stored (false: the key is fresh).
        stored: bool,
        /// The instant the state is read at.
        now_us: Ticks,
        /// The policy's limit or capacity.
        limit: u64,
        /// What the state holds, named by `measure`, in units.
        used: u64,
        /// `window count`, `weighted count`, `admitted in the last period`,
        /// `tokens available`, `water level` or `queue room`.
        measure: &'static str,
        /// Sliding log only: the instants it remembers.
        entries: Option<u64>,
        /// Whole units a request could take now.
        remaining: u64,
        /// Until the state is fresh again (0: fresh).
        fresh_after_us: Ticks,
        /// The canonical encoding, in hex (null when fresh).
        encoded: Option<String>,
    }

    impl View {
        pub fn new<A: Algorithm>(
            algorithm: &A,
            policy: &Policy,
            key: &str,
            stored_key: &str,
            state: Option<A::State>,
            now: Ticks,
        ) -> Self {
            let bytes = state.as_ref().map(|s| algorithm.encode_to_vec(s));
            let decision = algorithm.peek(state, now, 0);
            let limit = policy.limit();
            let left = limit.saturating_sub(decision.remaining);
            let (measure, used) = match policy.algorithm {
                Kind::FixedWindow => ("window count", left),
                Kind::SlidingCounter => ("weighted count", left),
                Kind::SlidingLog => ("admitted in the last period", left),
                Kind::TokenBucket => ("tokens available", decision.remaining),
                Kind::LeakyBucket => ("water level", left),
                Kind::LeakyPacing => ("queue room", decision.remaining),
                // Shown by the lease view; no rate algorithm has this kind.
                Kind::Concurrency => ("leases held", left),
                _ => ("used of the tightest limit", left),
            };
            // Version, tag and length (10 bytes), then 16 bytes per instant.
            let entries =
                (policy.algorithm == Kind::SlidingLog && policy.ban.is_none()).then(|| {
                    bytes.as_ref().map_or(0, |b| {
                        u64::try_from(b.len().saturating_sub(10) / 16).unwrap_or(0)
                    })
                });
            Self {
                key: key.to_owned(),
                stored_key: stored_key.to_owned(),
                algorithm: policy.algorithm.name().to_owned(),
                stored: bytes.is_some(),
                now_us: now,
                limit,
                used,
                measure,
                entries,
                remaining: decision.remaining,
                fresh_after_us: decision.reset_after,
                encoded: bytes.map(|b| b.iter().map(|b| format!("{b:02x}")).collect()),
            }
        }

        pub fn write_text(&self, out: &mut impl Write) -> std::io::Result<()> {
            let mut rows = vec![
                ("key", self.key.clone()),
                ("stored as", self.stored_key.clone()),
                ("algorithm", self.algorithm.clone()),
            ];
            if let Some(encoded) = &self.encoded {
                rows.push((self.measure, format!("{} of {}", self.used, self.limit)));
                if let Some(entries) = self.entries {
                    rows.push(("entries", entries.to_string()));
                }
                rows.push(("remaining", self.remaining.to_string()));
                rows.push((
                    "fresh again",
                    format!(
                        "in {} (at {} µs)",
                        human(self.fresh_after_us),
                        self.now_us.saturating_add(self.fresh_after_us)
                    ),
                ));
                rows.push(("encoded", encoded.clone()));
            } else {
                rows.push(("state", "fresh (nothing stored)".into()));
                rows.push(("remaining", self.remaining.to_string()));
            }
            crate::write_rows(out, &rows)
        }
    }
}

/// `purge`: every state of one policy, gone.
struct Purge<'a> {
    open: Open,
    name: &'a str,
}

impl Job for Purge<'_> {
    type Output = Result<ExitCode, Failure>;
    fn run<A>(self, algorithm: A) -> Self::Output
    where
        A: Hosted,
        A::State: Debug + Send,
    {
        let purged = self.open.store(algorithm)?.purge()?;
        let mut out = std::io::stdout().lock();
        writeln!(
            out,
            "{}: purged {purged} {} (keys {}*)",
            self.name,
            if purged == 1 { "state" } else { "states" },
            self.open.namespace
        )
        .and_then(|()| out.flush())
        .map_err(output)?;
        Ok(ExitCode::SUCCESS)
    }
}

struct Replay<'a> {
    trace: &'a str,
    open: Open,
}

impl Job for Replay<'_> {
    type Output = Result<ExitCode, Failure>;
    fn run<A>(self, algorithm: A) -> Self::Output
    where
        A: Hosted,
        A::State: Debug + Send,
    {
        let (name, input): (&str, Box<dyn Read>) = if self.trace == "-" {
            ("stdin", Box::new(std::io::stdin().lock()))
        } else {
            let file = std::fs::File::open(self.trace)
                .map_err(|e| Failure::Input(format!("cannot read {}: {e}", self.trace)))?;
            (self.trace, Box::new(std::io::BufReader::new(file)))
        };
        let store = self.open.store(algorithm)?;
        let mut reader = csv::ReaderBuilder::new()
            .flexible(true)
            .has_headers(false)
            .from_reader(input);
        // Every error in a trace reads `FILE:LINE: what`.
        let bad = |line: u64, what: String| Failure::Input(format!("{name}:{line}: {what}"));
        let mut out = BufWriter::new(std::io::stdout().lock());
        let mut last = 0;
        let mut row = csv::StringRecord::new();
        let mut line = 0;
        loop {
            let more = reader.read_record(&mut row).map_err(|e| {
                let at = e.position().map_or(line + 1, csv::Position::line);
                match e.kind() {
                    csv::ErrorKind::Utf8 { .. } => bad(at, "not UTF-8 text".into()),
                    _ => bad(at, e.to_string()),
                }
            })?;
            if !more {
                break;
            }
            line = row.position().map_or(line + 1, csv::Position::line);
            let fields: Vec<&str> = row.iter().map(str::trim).collect();
            if line == 1 {
                if fields != ["t_us", "key", "cost"] {
                    return Err(bad(line, "the header must be t_us,key,cost".into()));
                }
                continue;
            }
            let [t_us, key, cost] = fields[..] else {
                return Err(bad(
                    line,
                    format!("expected 3 fields (t_us,key,cost), found {}", fields.len()),
                ));
            };
            let t_us: Ticks = t_us
                .parse()
                .ok()
                .and_then(|t| check_now(t).ok())
                .ok_or_else(|| {
                    bad(
                        line,
                        format!(
                            "t_us must be a whole number of microseconds up to 2^62, got {t_us:?}"
                        ),
                    )
                })?;
            let cost: u64 = cost
                .parse()
                .map_err(|_| bad(line, format!("cost must be a whole number, got {cost:?}")))?;
            if t_us < last {
                return Err(bad(
                    line,
                    format!("t_us goes backwards ({t_us} after {last})"),
                ));
            }
            last = t_us;
            let decision = store.decide(key, t_us, cost)?;
            json_line(&mut out, &Record::new(t_us, key, cost, &decision))?;
        }
        if line == 0 {
            return Err(bad(1, "the header must be t_us,key,cost".into()));
        }
        out.flush().map_err(output)?;
        if let Some(warning) = store.warning() {
            let _ = writeln!(std::io::stderr(), "tollgate: {warning}");
        }
        Ok(ExitCode::SUCCESS)
    }
}

struct Simulate<'a> {
    policy: &'a Policy,
    name: &'a str,
    traffic: &'a Traffic,
    duration: Ticks,
    open: Open,
    chart: Option<&'a str>,
}

impl Job for Simulate<'_> {
    type Output = Result<ExitCode, Failure>;
    fn run<A>(self, algorithm: A) -> Self::Output
    where
        A: Hosted,
        A::State: Debug + Send,
    {
        let store: Box<dyn Store<A>> = self.open.store(algorithm)?;
        let period = self.policy.period();
        let mut run = stats::Run::new(self.duration, chart::bin_width(self.duration, period));
        let mut progress = Progress::new(self.duration);
        for request in self.traffic.requests(self.duration) {
            if run.offered >= stats::MAX_OFFERED {
                return Err(Failure::Input(format!(
                    "--traffic {} offers more than the {} requests a simulation decides; shorten --duration or lower the rate",
                    self.traffic,
                    stats::MAX_OFFERED
                )));
            }
            let decision = store.decide(&request.key(), request.at, request.cost)?;
            run.record(&request, &decision);
            progress.show(request.at);
        }
        progress.finish();
        if let Some(warning) = store.warning() {
            let _ = writeln!(std::io::stderr(), "tollgate: {warning}");
        }
        let summary = run.summary(period);
        let mut out = BufWriter::new(std::io::stdout().lock());
        let about = [&self.policy.description, &self.policy.owner]
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
                format!("{} ({})", self.name, describe(self.policy)),
            ),
            ("about".to_owned(), about),
            ("backend".to_owned(), self.open.backend.describe()),
            (
                "offered".to_owned(),
                format!("{} over {}", summary.offered, human(self.duration)),
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
        if let Some(path) = self.chart {
            let title = format!("{}: {}", self.name, describe(self.policy));
            let svg = chart::svg(&chart::Chart {
                title: &title,
                duration: self.duration,
                bin: run.bin,
                bins: &run.bins,
                limit_per_bin: chart::limit_per_bin(self.policy, run.bin, self.traffic.keys()),
            });
            std::fs::write(path, svg)
                .map_err(|e| Failure::Output(format!("cannot write {path}: {e}")))?;
            rows.push(("chart".to_owned(), path.to_owned()));
        }
        write_rows(&mut out, &rows).map_err(output)?;
        out.flush().map_err(output)?;
        Ok(ExitCode::SUCCESS)
    }
}

fn describe(policy: &Policy) -> String {
    let kind = policy.algorithm.name();
    let period = human(policy.period());
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
