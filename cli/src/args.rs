//! The flags several commands share (which policy, which backend, which key) and what
//! they resolve to: a loaded policy and the options to open its backend.

use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::Args;
use sluicegate_core::{check_now, AnyAlgorithm, Ticks, MAX_TICKS};
use sluicegate_policy::{list, parse_duration, short, Built, Kind, Policy, PolicyDuration, Style};

use crate::backend::{self, Backend, Open, SledDurability};
use crate::failure::Failure;

/// The algorithms `--algorithm` takes (leases and composites need a policy file).
fn rate_kinds() -> impl Iterator<Item = Kind> {
    Kind::ALL
        .into_iter()
        .filter(|kind| !matches!(kind, Kind::Concurrency | Kind::Composite))
}

/// `--algorithm`: one of [`rate_kinds`], by its canonical name.
fn algorithm_flag() -> impl TypedValueParser<Value = Kind> {
    PossibleValuesParser::new(rate_kinds().map(Kind::name))
        .map(|name| Kind::from_name(&name).unwrap_or(Kind::FixedWindow))
}

/// The rate kinds that take `fields`, e.g. `fixed-window, sliding-log, sliding-counter`.
fn kinds_taking(fields: &[&str]) -> String {
    let names: Vec<&str> = rate_kinds()
        .filter(|kind| kind.fields() == fields)
        .map(Kind::name)
        .collect();
    names.join(", ")
}

#[derive(Debug, Args)]
pub struct PolicyArgs {
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
    #[arg(long, value_parser = algorithm_flag())]
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
    #[arg(long, value_parser = parse_duration, allow_hyphen_values = true)]
    period: Option<PolicyDuration>,
}

#[derive(Debug, Args)]
pub struct BackendArgs {
    /// memory, sled:PATH, or a Redis URL: redis://HOST:PORT/DB, rediss://HOST:PORT/DB for
    /// TLS, or redis+sentinel://HOST:PORT[,HOST:PORT…]/MASTER[/DB] (rediss+sentinel:// for
    /// TLS) for a primary under Redis Sentinel; for locks and leases also
    /// etcd://HOST:PORT[,HOST:PORT…]. A sled database is created only by commands that
    /// record decisions, and only in an existing directory.
    #[arg(long, default_value = "memory", value_parser = backend::backend_flag)]
    pub backend: String,
    /// rediss:// and rediss+sentinel:// only: trust the CA certificates in this PEM file (a private CA, a
    /// managed service's) instead of the system's.
    #[arg(long, value_name = "FILE")]
    redis_ca: Option<String>,
    /// Stored keys are PREFIX + policy name + ":" + KEY (with flags instead of a policy
    /// file, the algorithm and its parameters name the policy).
    #[arg(long, default_value = "sluicegate:")]
    pub prefix: String,
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

/// A policy and the backend holding its states: what most commands act on.
#[derive(Debug, Args)]
pub struct PolicyBackendArgs {
    #[command(flatten)]
    pub policy: PolicyArgs,
    #[command(flatten)]
    pub backend: BackendArgs,
}

#[derive(Debug, Args)]
pub struct KeyArgs {
    /// The key (a user, an IP, a route); stored as PREFIX + policy + ":" + KEY.
    pub key: String,
    #[command(flatten)]
    pub target: PolicyBackendArgs,
    /// The request's cost.
    #[arg(long, default_value_t = 1, value_parser = whole, allow_negative_numbers = true)]
    pub cost: u64,
    /// Decide at this time (µs since the Unix epoch, at most 2^62) instead of now on the
    /// backend's clock (Redis: the server's time, so its keys expire).
    #[arg(long, value_parser = instant, allow_negative_numbers = true)]
    pub now: Option<Ticks>,
}

/// A count or a cost: a non-negative integer.
pub fn whole(text: &str) -> Result<u64, String> {
    text.trim()
        .parse()
        .map_err(|_| format!("must be a non-negative integer, got {text:?}"))
}

/// An instant in the core's range: 0 to `MAX_TICKS` µs, checked by the core's own
/// `check_now`, the one check every host applies to a time it is given.
pub fn instant(text: &str) -> Result<Ticks, String> {
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

impl BackendArgs {
    /// How to open the backend for policy `name`: its keys are `PREFIX name:KEY`. A CA
    /// file that cannot be read or is no PEM certificate is bad input.
    pub fn open(&self, name: &str, creates: bool) -> Result<Open, Failure> {
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
            backend: Backend::new(&self.backend, ca).map_err(Failure::Input)?,
            namespace: format!("{}{name}:", self.prefix),
            creates,
            durability: self.durability,
            max_keys: usize::try_from(self.max_keys).unwrap_or(usize::MAX),
            in_use_wait: std::time::Duration::ZERO,
        })
    }
}

/// A policy ready to run: what it says, what it builds and its name.
#[derive(Debug)]
pub struct Loaded {
    pub policy: Policy,
    pub built: Built,
    pub name: String,
}

impl Loaded {
    /// The algorithm of a rate policy; a concurrency policy has no rate.
    pub fn rate(&self) -> Result<&AnyAlgorithm, Failure> {
        match &self.built {
            Built::Rule(algorithm) => Ok(algorithm),
            _ => Err(Failure::Input(format!(
                "policy {:?} is a concurrency limit, not a rate: use `sluicegate lease acquire|release|renew KEY` and `sluicegate inspect KEY`",
                self.name
            ))),
        }
    }

    /// The lease model and ttl of a concurrency policy.
    #[cfg(any(feature = "sled", feature = "redis"))]
    pub fn leases(&self) -> Result<(sluicegate_core::Concurrency, Ticks), Failure> {
        match self.built {
            Built::Leases { model, ttl, .. } => Ok((model, ttl)),
            _ => Err(Failure::Input(format!(
                "policy {:?} is a rate limit, not a concurrency limit: leases need a policy with algorithm = \"concurrency\", limit and lease",
                self.name
            ))),
        }
    }
}

impl PolicyArgs {
    /// The policy from --config/--policy or from the algorithm flags, if this app may use
    /// it. Everything missing is reported at once.
    pub fn load(&self) -> Result<Loaded, Failure> {
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
        let (policy, built, name) = match (&self.config, &self.policy) {
            (Some(_), Some(_)) | (None, Some(_)) | (Some(_), None) if !flags.is_empty() => {
                return Err(Failure::Input(format!(
                    "give either --config FILE --policy NAME or --algorithm with its parameters, not both ({} with {})",
                    list(&flags),
                    if self.config.is_some() { "--config" } else { "--policy" }
                )))
            }
            (Some(config), Some(name)) => {
                let (policy, built) =
                    sluicegate_policy::load(config, name)?;
                (policy, built, name.clone())
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
                    return Err(Failure::Input(format!(
                        "no policy given: use --config FILE --policy NAME, or --algorithm with --limit N --period D ({}) or --capacity N --rate N --period D ({})",
                        kinds_taking(&["limit", "period"]),
                        kinds_taking(&["capacity", "rate", "period"]),
                    )));
                };
                let policy =
                    Policy::from_flags(kind, self.limit, self.capacity, self.rate, self.period);
                let built = policy
                    .build(Style::Flags)
                    .map_err(|p| Failure::Input(p.message))?;
                let name = flag_name(&policy);
                (policy, built, name)
            }
        };
        // The operator runs the command; `--app` checks the allow-list as the service does.
        if let Some(app) = self.app.as_deref().filter(|app| !policy.admits_app(app)) {
            return Err(Failure::NoPolicyForApp(format!(
                "no such policy for this app: {name:?} serves {}, not {app:?}",
                policy.apps.join(", ")
            )));
        }
        Ok(Loaded {
            policy,
            built,
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
        short(policy.period())
    )
}

impl PolicyBackendArgs {
    /// The policy and the options to open its backend (`creates`: whether this command
    /// records decisions, and so may create a sled database).
    pub fn load(&self, creates: bool) -> Result<(Loaded, Open), Failure> {
        let loaded = self.policy.load()?;
        let open = self.backend.open(&loaded.name, creates)?;
        Ok((loaded, open))
    }
}

impl KeyArgs {
    /// See [`PolicyBackendArgs::load`].
    pub fn load(&self, creates: bool) -> Result<(Loaded, Open), Failure> {
        self.target.load(creates)
    }
}
