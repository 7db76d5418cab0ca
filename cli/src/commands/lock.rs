//! `sluicegate lock acquire|release|renew|inspect`: a lease table of one holder per name,
//! on sled, Redis or etcd (`--backend etcd://HOST:PORT[,HOST:PORT…]`, where the token is
//! the cluster's revision and `--now` is refused: etcd's leases run on its clock).

use std::process::ExitCode;

use clap::{Args, Subcommand};
use sluicegate_core::{Concurrency, KeyDisplay, Ticks};

use crate::args::{instant, BackendArgs};
use crate::failure::Failure;
use crate::leasing::{self, call, lease_open, Call, Holder, Op, Wait};
use sluicegate_policy::{PolicyDuration, Style};

#[derive(Debug, Subcommand)]
pub enum LockCommand {
    /// Take the lock NAME for --owner; prints `acquired token=N expires_at_us=T holds=H`.
    /// Exit 1 if another owner holds it (after --wait). The same owner re-enters it.
    Acquire {
        #[command(flatten)]
        on: LockArgs,
        #[command(flatten)]
        ttl: Ttl,
        #[command(flatten)]
        wait: Wait,
    },
    /// Release NAME once (freed when released as often as acquired); prints
    /// `released token=N holds=H`. Exit 1 if --owner does not hold it.
    Release {
        #[command(flatten)]
        on: LockArgs,
    },
    /// Extend --owner's hold on NAME to now + --ttl; exit 1 if it does not hold it (it
    /// expired: stop acting on it).
    Renew {
        #[command(flatten)]
        on: LockArgs,
        #[command(flatten)]
        ttl: Ttl,
    },
    /// Print the lock's holder, its expiry and the last fencing token (--json for JSON).
    Inspect {
        /// The lock's name.
        name: String,
        #[command(flatten)]
        backend: BackendArgs,
        /// Read at this time (µs since the Unix epoch) instead of now.
        #[arg(long, value_parser = instant, allow_negative_numbers = true)]
        now: Option<Ticks>,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Args)]
pub struct LockArgs {
    /// The lock's name; stored as PREFIX + "lock:" + NAME.
    name: String,
    #[command(flatten)]
    holder: Holder,
}

#[derive(Debug, Args)]
pub struct Ttl {
    /// How long the lease lasts unless renewed or released, e.g. 30s (at most 366 days).
    #[arg(long, value_parser = sluicegate_policy::parse_duration, allow_hyphen_values = true)]
    ttl: PolicyDuration,
}

pub fn run(command: LockCommand) -> Result<ExitCode, Failure> {
    let (on, op) = match command {
        LockCommand::Acquire { on, ttl, wait } => {
            let ttl = ttl_flag(ttl.ttl)?;
            (
                on,
                Op::Acquire {
                    ttl,
                    wait: wait.wait.map(|w| w.0),
                },
            )
        }
        LockCommand::Release { on } => (on, Op::Release),
        LockCommand::Renew { on, ttl } => {
            let ttl = ttl_flag(ttl.ttl)?;
            (on, Op::Renew { ttl })
        }
        LockCommand::Inspect {
            name,
            backend,
            now,
            json,
        } => {
            let open = lease_open(&backend, "lock", false)?;
            return leasing::inspect(leasing::Inspect {
                key: &name,
                model: Concurrency::lock(),
                algorithm: "lock",
                open,
                now,
                json,
            });
        }
    };
    call(&Call {
        what: format!("lock {}", KeyDisplay(on.name.as_bytes())),
        key: &on.name,
        model: Concurrency::lock(),
        open: lease_open(&on.holder.backend, "lock", matches!(op, Op::Acquire { .. }))?,
        holder: &on.holder,
        op,
    })
}

/// `--ttl` in the core's range, in the units written.
fn ttl_flag(ttl: PolicyDuration) -> Result<Ticks, Failure> {
    sluicegate_policy::check_lease(ttl.0).map_err(|e| {
        let problem = sluicegate_policy::param_problem(&e, Style::Flags);
        Failure::Input(problem.message.replace("--lease", "--ttl"))
    })
}
