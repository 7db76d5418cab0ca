//! The commands, one file each: its flags and its `run`. This lists them and hands
//! each its flags.

mod check;
mod fleet;
mod fleet_node;
mod inspect;
mod lease;
mod lock;
mod peek;
mod policy;
mod purge;
mod replay;
mod reset;
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
    /// Locks: one holder at a time, reentrant, with fencing tokens (on sled or Redis).
    #[command(subcommand)]
    Lock(lock::LockCommand),
    /// Leases of a concurrency policy: at most `limit` held at once (on sled or Redis).
    #[command(subcommand)]
    Lease(lease::LeaseCommand),
    /// Measure a fleet mode: N node processes share the policy through Redis; prints
    /// decisions per second per node, Redis calls per 1000 decisions and the over- and
    /// under-admission per period, also with a node killed and one joining mid-run.
    Fleet(fleet::FleetArgs),
    /// One node of `tollgate fleet` (started by it).
    #[command(hide = true)]
    FleetNode(fleet_node::NodeArgs),
    /// Print KEY's stored state in the policy's units (--json for JSON); for a
    /// concurrency policy its holders, their expiries and the last fencing token.
    Inspect(inspect::InspectArgs),
    /// Run the rate-limit service: policies, apps and users in a database, decisions
    /// over HTTP (see server/API.md); --init-admin prints the first admin's token.
    Serve(serve::ServeArgs),
    /// Manage the policies of a `tollgate serve` (list, show, apply a policy file,
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
            Self::Lock(command) => lock::run(command),
            Self::Lease(command) => lease::run(command),
            Self::Fleet(args) => fleet::run(args),
            Self::FleetNode(args) => fleet_node::run(args),
            Self::Inspect(args) => inspect::run(args),
            Self::Serve(args) => serve::run(args),
            Self::Policy(command) => policy::run(command),
        }
    }
}
