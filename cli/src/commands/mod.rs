//! The commands, one file each: its flags and its `run`. This lists them and hands
//! each its flags.

mod check;
#[cfg(feature = "redis")]
mod fleet;
#[cfg(feature = "redis")]
mod fleet_node;
mod inspect;
#[cfg(any(feature = "sled", feature = "redis"))]
mod lease;
#[cfg(any(feature = "sled", feature = "redis"))]
mod lock;
mod peek;
#[cfg(feature = "remote")]
mod policy;
mod purge;
mod replay;
mod reset;
#[cfg(feature = "serve")]
mod serve;
mod simulate;

use std::process::ExitCode;

use clap::Subcommand;

use crate::args::{KeyArgs, PolicyBackendArgs};
use crate::failure::Failure;

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Offer synthetic traffic to a policy on a simulated clock; print a summary, chart it.
    Simulate(simulate::SimulateArgs),
    /// Decide a CSV trace (header t_us,key,cost) and print one JSON line per request.
    Replay(replay::ReplayArgs),
    /// Decide one request for KEY now (or at --now) and print the decision.
    Check(KeyArgs),
    /// What a request for KEY would get, changing nothing.
    Peek(KeyArgs),
    /// Forget KEY's state.
    Reset(KeyArgs),
    /// Delete every state of the policy in its namespace (PREFIX + policy + ":"), e.g.
    /// after a replay or `check --now`, whose states on Redis never expire. Keys holding
    /// anything else are kept.
    Purge(PolicyBackendArgs),
    #[cfg(any(feature = "sled", feature = "redis"))]
    /// Locks: one holder at a time, reentrant, with fencing tokens (on sled or Redis).
    #[command(subcommand)]
    Lock(lock::LockCommand),
    #[cfg(any(feature = "sled", feature = "redis"))]
    /// Leases of a concurrency policy: at most `limit` held at once (on sled or Redis).
    #[command(subcommand)]
    Lease(lease::LeaseCommand),
    #[cfg(feature = "redis")]
    /// Measure a fleet mode: N node processes share the policy through Redis; prints
    /// decisions per second per node, Redis calls per 1000 decisions and the over- and
    /// under-admission per period, also with a node killed and one joining mid-run.
    Fleet(fleet::FleetArgs),
    #[cfg(feature = "redis")]
    /// One node of `sluicegate fleet` (started by it).
    #[command(hide = true)]
    FleetNode(fleet_node::NodeArgs),
    /// Print KEY's stored state in the policy's units (--json for JSON); for a
    /// concurrency policy its holders, their expiries and the last fencing token.
    Inspect(inspect::InspectArgs),
    #[cfg(feature = "serve")]
    /// Run the rate-limit service: policies, apps and users in a database, decisions
    /// over HTTP (see server/API.md); --init-admin prints the first admin's token.
    #[command(after_help = serve::TRACES_HELP)]
    Serve(serve::ServeArgs),
    #[cfg(feature = "remote")]
    /// Manage the policies of a `sluicegate serve` (list, show, apply a policy file,
    /// delete) with a user token, for scripts and CI.
    #[command(subcommand)]
    Policy(policy::PolicyCommand),
}

impl Command {
    pub fn run(self) -> Result<ExitCode, Failure> {
        match self {
            Self::Simulate(args) => simulate::run(args),
            Self::Replay(args) => replay::run(args),
            Self::Check(args) => check::run(args),
            Self::Peek(args) => peek::run(args),
            Self::Reset(args) => reset::run(args),
            Self::Purge(args) => purge::run(args),
            #[cfg(any(feature = "sled", feature = "redis"))]
            Self::Lock(command) => lock::run(command),
            #[cfg(any(feature = "sled", feature = "redis"))]
            Self::Lease(command) => lease::run(command),
            #[cfg(feature = "redis")]
            Self::Fleet(args) => fleet::run(args),
            #[cfg(feature = "redis")]
            Self::FleetNode(args) => fleet_node::run(args),
            Self::Inspect(args) => inspect::run(args),
            #[cfg(feature = "serve")]
            Self::Serve(args) => serve::run(args),
            #[cfg(feature = "remote")]
            Self::Policy(command) => policy::run(command),
        }
    }
}
