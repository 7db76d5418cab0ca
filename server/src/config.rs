//! How a server runs: the flags of `sluicegate serve`, declared once here, each with
//! its default and its environment variable (`SLUICEGATE_` and the flag's name, given
//! to every flag by [`with_env`]; a flag given on the command line wins).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{Arg, Args, CommandFactory, FromArgMatches, Parser};
use sluicegate_core::FailPolicy;

/// How a server runs (the flags of `sluicegate serve`). [`Config::default`] is every
/// flag's default, whatever the environment holds.
#[derive(Debug, Clone, Args)]
#[command(mut_args = with_env)]
pub struct Config {
    /// Where to listen for HTTP.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Where to serve Envoy's rate limit service (gRPC), e.g. 127.0.0.1:8081; off when
    /// not given.
    #[arg(long)]
    pub grpc_listen: Option<SocketAddr>,
    /// The embedded store's directory (SQLite), unless --store is given.
    #[arg(long, default_value = "sluicegate-data")]
    pub data_dir: PathBuf,
    /// postgres://USER@HOST:PORT/DB: the store a fleet of servers shares.
    #[arg(long)]
    pub store: Option<String>,
    /// redis://HOST:PORT/DB: decisions a fleet shares (else in this process).
    #[arg(long)]
    pub decisions: Option<String>,
    /// The answer while the --decisions Redis is unreachable: error (503, the caller
    /// decides), open (admit), closed (deny), local (decide in this process: each
    /// server enforces the limit alone meanwhile).
    #[arg(
        long,
        default_value = "error",
        value_parser = PossibleValuesParser::new(["error", "open", "closed", "local"]).map(fail_policy)
    )]
    pub fail: FailPolicy<()>,
    /// Keys kept per policy by in-process limiters (least fresh forgotten first).
    #[arg(long, default_value_t = 100_000)]
    pub max_keys: usize,
    /// Memory per policy's in-process limiter at the worst (bytes, or with KiB, MiB or
    /// GiB): a policy whose keys could take more (a sliding log of a large limit) holds
    /// fewer keys than --max-keys.
    #[arg(long, default_value = "256MiB", value_parser = bytes)]
    pub max_policy_bytes: usize,
    /// Serve /metrics without a token (for a scraper on a trusted network).
    #[arg(long)]
    pub metrics_open: bool,
    /// The longest a request may take before it is answered 503.
    #[arg(skip = Duration::from_secs(10))]
    pub timeout: Duration,
    /// How often the store's change counter is polled.
    #[arg(skip = Duration::from_millis(250))]
    pub poll: Duration,
    /// How long a request's head may take to arrive, from its first byte (and a new
    /// connection's first byte, from its opening; a gRPC call's message, from its head).
    #[arg(long, default_value = "5s", value_parser = duration)]
    pub header_timeout: Duration,
    /// How long a keep-alive connection may wait for its next request.
    #[arg(long, default_value = "60s", value_parser = duration)]
    pub idle_timeout: Duration,
    /// Connections open at once, per listener (HTTP, gRPC); the excess is answered 503
    /// and closed at once.
    #[arg(long, default_value = "1024", value_parser = at_least_one)]
    pub max_connections: usize,
    /// On SIGTERM or Ctrl-C, how long requests in flight may take before the
    /// connections left are closed.
    #[arg(long, default_value = "10s", value_parser = duration)]
    pub shutdown_timeout: Duration,
    /// How often gRPC pings a connection; one ping unanswered for as long closes it.
    #[arg(long, default_value = "30s", value_parser = duration)]
    pub grpc_keepalive: Duration,
    /// How often Envoy reports quota usage on an RLQS stream (5 s, fixed in Envoy
    /// today): assignments live three of these (rounded up to whole seconds), and a
    /// stream may send about one report per bucket in one.
    #[arg(long, default_value = "5s", value_parser = duration)]
    pub rlqs_report_interval: Duration,
    /// Calls at once on one gRPC connection.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
    pub grpc_max_streams: u32,
    /// gRPC calls in flight at once, all connections together; the excess is answered
    /// RESOURCE_EXHAUSTED at once (a bound on what calls not yet answered hold).
    #[arg(long, default_value = "1024", value_parser = at_least_one)]
    pub grpc_max_calls: usize,
    /// The most policies the store may hold.
    #[arg(long, default_value_t = 10_000)]
    pub max_policies: usize,
    /// The most policies that may list one app.
    #[arg(long, default_value_t = 1_000)]
    pub max_policies_per_app: usize,
    /// The most reports' ids one app may hold at once (each is kept 24 hours, so that a
    /// retried report counts once); a report or estimate with a new id beyond it is
    /// refused (409).
    #[arg(long, default_value_t = 100_000)]
    pub max_report_ids: usize,
    /// Every rate policy in shadow mode: decided and counted as if enforcing, always
    /// admitted, would-be denials reported (to try limits on live traffic).
    #[arg(long)]
    pub shadow: bool,
    /// Every rule of envoyproxy/ratelimit's YAML in quota mode, as their QUOTA_MODE:
    /// over its limit, a rule refuses a request only when every rule the request
    /// counted on is over.
    #[arg(long)]
    pub quota_mode: bool,
    /// envoyproxy/ratelimit's YAML, read as it is: a file, or a directory of `*.yaml`
    /// and `*.yml` files, one domain each, answered over gRPC (--grpc-listen) with their
    /// matching; the top-level `sluicegate_apps: [NAME, ...]` limits which apps may ask.
    #[arg(long, value_name = "DIR")]
    pub envoy_config: Option<PathBuf>,
    /// Kuadrant limitador's limits file, read as it is (CEL conditions and variables),
    /// watched as --envoy-config is: its namespaces answered over gRPC (Envoy's RLS and
    /// Kuadrant's CheckRateLimit/Report) and over limitador's HTTP API.
    #[arg(long, value_name = "FILE")]
    pub limitador_config: Option<PathBuf>,
    /// Rate limit headers in the answers for limitador's namespaces, as limitador's
    /// flag: NONE, or DRAFT_VERSION_03 (X-RateLimit-Limit, -Remaining and -Reset).
    #[arg(
        long,
        default_value = "NONE",
        value_name = "NONE|DRAFT_VERSION_03",
        action = clap::ArgAction::Set,
        value_parser = PossibleValuesParser::new(["NONE", "DRAFT_VERSION_03"]).map(|v| v == "DRAFT_VERSION_03")
    )]
    pub rate_limit_headers: bool,
    /// Policies from files: a TOML policy file or envoyproxy/ratelimit's YAML, or a
    /// directory of them (*.toml, *.yaml, *.yml), watched: a change applies within a
    /// second, an invalid one is refused whole (logged, counted in /metrics). The API
    /// cannot change these policies (403 naming the file).
    #[arg(long, value_name = "FILE|DIR")]
    pub policies: Option<PathBuf>,
    /// Show in /metrics how much of its limit each of this policy's most used keys has
    /// taken (`sluicegate_key_usage_ratio{policy,key}`); repeat for several policies
    /// (in the environment: separated by commas).
    #[arg(long, value_name = "POLICY", value_delimiter = ',')]
    pub key_usage: Vec<String>,
    /// The most keys --key-usage shows per policy (at most 1000): a bound on the
    /// gauge's series.
    #[arg(
        long,
        default_value_t = 50,
        value_name = "N",
        value_parser = clap::value_parser!(u16).range(0..=1000).map(usize::from)
    )]
    pub key_usage_max: usize,
}

/// The flags alone, to read their defaults.
#[derive(Debug, Parser)]
struct Flags {
    #[command(flatten)]
    config: Config,
}

impl Default for Config {
    fn default() -> Self {
        // Each flag's declared default: the environment is not read.
        let command = Flags::command().mut_args(|arg| arg.env(None));
        let matches = command.get_matches_from(["serve"]);
        Config::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
    }
}

/// `arg` read also from `SLUICEGATE_` and its name (`--max-keys`: `SLUICEGATE_MAX_KEYS`),
/// whose value `--help` never shows: some hold passwords.
fn with_env(arg: Arg) -> Arg {
    let Some(long) = arg.get_long() else {
        return arg;
    };
    let name = format!("SLUICEGATE_{}", long.replace('-', "_").to_uppercase());
    arg.env(name).hide_env_values(true)
}

/// A flag's value that is not one.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct FlagError(String);

fn fail_policy(name: String) -> FailPolicy<()> {
    match name.as_str() {
        "open" => FailPolicy::Open,
        "closed" => FailPolicy::Closed,
        "local" => FailPolicy::Local(()),
        _ => FailPolicy::Error,
    }
}

/// A flag's duration (`250ms`, `5s`), as policies write them.
fn duration(text: &str) -> Result<Duration, FlagError> {
    sluicegate_policy::parse_duration(text)
        .map(|d| Duration::from_micros(d.0))
        .map_err(|e| FlagError(e.to_string()))
}

/// A count of which 0 would serve nothing (`--max-connections 0`).
fn at_least_one(text: &str) -> Result<usize, FlagError> {
    text.parse::<usize>()
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| FlagError(format!("{text:?} is not a whole number of at least 1")))
}

/// `65536`, `64KiB`, `256MiB`, `1GiB`.
fn bytes(text: &str) -> Result<usize, FlagError> {
    let (digits, shift) = [("KiB", 10), ("MiB", 20), ("GiB", 30)]
        .iter()
        .find_map(|&(unit, shift)| Some((text.strip_suffix(unit)?, shift)))
        .unwrap_or((text, 0));
    digits
        .trim()
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(1 << shift))
        .filter(|&n| n > 0)
        .ok_or_else(|| {
            FlagError(format!(
                "{text:?} is not a size (bytes, or with KiB, MiB or GiB)"
            ))
        })
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    use super::{Config, Flags};

    #[test]
    fn the_defaults_are_the_flags_defaults_whatever_the_environment() {
        let config = Config::default();
        assert_eq!(config.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(config.max_policy_bytes, 256 << 20);
        assert_eq!(config.header_timeout.as_secs(), 5);
        assert_eq!(config.fail, sluicegate_core::FailPolicy::Error);
    }

    #[test]
    fn flags_parse_with_their_own_parsers() {
        let parsed = Flags::try_parse_from(["serve", "--max-keys", "7", "--fail", "local"]);
        let config = parsed.unwrap().config;
        assert_eq!(config.max_keys, 7);
        assert!(!config.rate_limit_headers);
        let draft = ["serve", "--rate-limit-headers", "DRAFT_VERSION_03"];
        assert!(
            Flags::try_parse_from(draft)
                .unwrap()
                .config
                .rate_limit_headers
        );
        assert!(Flags::try_parse_from(["serve", "--rate-limit-headers", "v3"]).is_err());
        assert_eq!(config.fail, sluicegate_core::FailPolicy::Local(()));
        for zero in [
            "--max-policy-bytes",
            "--max-connections",
            "--grpc-max-streams",
        ] {
            assert!(
                Flags::try_parse_from(["serve", zero, "0"]).is_err(),
                "{zero} 0"
            );
        }
    }

    #[test]
    fn every_flag_is_also_an_environment_variable_named_after_it() {
        let command = Flags::command();
        let envs: Vec<_> = command
            .get_arguments()
            .map(|arg| (arg.get_long(), arg.get_env()))
            .collect();
        assert!(envs.contains(&(
            Some("max-policies-per-app"),
            Some("SLUICEGATE_MAX_POLICIES_PER_APP".as_ref())
        )));
        assert!(envs.contains(&(Some("grpc-listen"), Some("SLUICEGATE_GRPC_LISTEN".as_ref()))));
        assert!(envs
            .iter()
            .all(|(long, env)| long.is_some() && env.is_some()));
    }
}
