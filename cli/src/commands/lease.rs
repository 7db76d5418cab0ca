//! `sluicegate lease acquire|release|renew`: the leases of a concurrency policy, each
//! held for the policy's `lease`, on sled, Redis or etcd (one key per slot on etcd).

use std::process::ExitCode;

use clap::{Args, Subcommand};
use sluicegate_core::KeyDisplay;

use crate::args::PolicyArgs;
use crate::failure::Failure;
use crate::leasing::{call, lease_open, Call, Holder, Op, Wait};

#[derive(Debug, Subcommand)]
pub enum LeaseCommand {
    /// Take one of the policy's leases on KEY for --owner, for the policy's `lease`;
    /// prints `acquired token=N expires_at_us=T holds=H`. Exit 1 if all are held.
    Acquire {
        #[command(flatten)]
        on: LeaseArgs,
        #[command(flatten)]
        wait: Wait,
    },
    /// Release --owner's lease on KEY once; exit 1 if it holds none.
    Release {
        #[command(flatten)]
        on: LeaseArgs,
    },
    /// Extend --owner's lease on KEY by the policy's `lease`; exit 1 if it holds none.
    Renew {
        #[command(flatten)]
        on: LeaseArgs,
    },
}

#[derive(Debug, Args)]
pub struct LeaseArgs {
    /// The key (a resource, a tenant); stored as PREFIX + policy + ":" + KEY.
    key: String,
    #[command(flatten)]
    policy: PolicyArgs,
    #[command(flatten)]
    holder: Holder,
}

pub fn run(command: LeaseCommand) -> Result<ExitCode, Failure> {
    // The ttl comes from the policy, so it is filled in once the policy is loaded.
    let (on, op) = match command {
        LeaseCommand::Acquire { on, wait } => (
            on,
            Op::Acquire {
                ttl: 0,
                wait: wait.wait.map(|w| w.0),
            },
        ),
        LeaseCommand::Release { on } => (on, Op::Release),
        LeaseCommand::Renew { on } => (on, Op::Renew { ttl: 0 }),
    };
    let loaded = on.policy.load()?;
    let (model, ttl) = loaded.leases()?;
    let op = match op {
        Op::Acquire { wait, .. } => Op::Acquire { ttl, wait },
        Op::Renew { .. } => Op::Renew { ttl },
        Op::Release => Op::Release,
    };
    call(&Call {
        what: format!(
            "key {} of policy {:?}",
            KeyDisplay(on.key.as_bytes()),
            loaded.name
        ),
        key: &on.key,
        model,
        open: lease_open(
            &on.holder.backend,
            &loaded.name,
            matches!(op, Op::Acquire { .. }),
        )?,
        holder: &on.holder,
        op,
    })
}
