//! `sluicegate lock acquire|release|renew|inspect`: a lease table of one holder per name,
//! on sled, Redis or etcd (`--backend etcd://HOST:PORT[,HOST:PORT…]`, where the token is
//! the cluster's revision and `--now` is refused: etcd's leases run on its clock). On
//! Redis and etcd a lock is of the lock family: shared or exclusive holders (`--mode`),
//! fair or not (`--fair`; etcd's are always fair), and `--wait` sleeps until the release
//! that makes its turn wakes it.

use std::process::ExitCode;

use clap::{Args, Subcommand};
use sluicegate_core::{Concurrency, KeyDisplay, Ticks};

use crate::args::{instant, BackendArgs};
use crate::failure::Failure;
use crate::leasing::{self, call, lease_open, Call, Holder, Op, Wait};
#[cfg(any(feature = "redis", feature = "etcd"))]
use crate::locking;
#[cfg(any(feature = "redis", feature = "etcd"))]
use sluicegate_core::rwlock::LockMode;
use sluicegate_policy::{PolicyDuration, Style};
#[cfg(any(feature = "redis", feature = "etcd"))]
use std::time::Duration;

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
        /// Redis and etcd: shared holders (readers) share the lock; an exclusive one (a
        /// writer) holds it alone, and while a writer waits new readers wait behind it.
        #[arg(long, value_enum, default_value = "exclusive")]
        mode: Mode,
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
        /// Redis: the lock is fair (see `acquire --fair`); etcd's always are.
        #[arg(long)]
        fair: bool,
    },
}

/// `--mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    Shared,
    Exclusive,
}

#[derive(Debug, Args)]
pub struct LockArgs {
    /// The lock's name; stored as PREFIX + "lock:" + NAME.
    name: String,
    #[command(flatten)]
    holder: Holder,
    /// Redis: grant in the order asked (a refused --wait takes a place in line, and
    /// nobody overtakes it). Give the same --fair to every command on the lock. On etcd
    /// every lock is fair (its line is the keys' creation order) and this changes nothing.
    #[arg(long)]
    fair: bool,
}

#[derive(Debug, Args)]
pub struct Ttl {
    /// How long the lease lasts unless renewed or released, e.g. 30s (at most 366 days).
    #[arg(long, value_parser = sluicegate_policy::parse_duration, allow_hyphen_values = true)]
    ttl: PolicyDuration,
}

pub fn run(command: LockCommand) -> Result<ExitCode, Failure> {
    let mut mode = Mode::Exclusive;
    let (on, op) = match command {
        LockCommand::Acquire {
            on,
            ttl,
            wait,
            mode: asked,
        } => {
            mode = asked;
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
            fair,
        } => {
            let open = lease_open(&backend, "lock", false)?;
            #[cfg(any(feature = "redis", feature = "etcd"))]
            let family = open.family(locking::lease(fair), locking::PLACE_TTL, Duration::ZERO)?;
            let inspect = leasing::Inspect {
                key: &name,
                model: Concurrency::lock(),
                algorithm: "lock",
                open,
                now,
                json,
            };
            #[cfg(any(feature = "redis", feature = "etcd"))]
            if let Some(mut lock) = family {
                return locking::inspect(&inspect, lock.as_mut());
            }
            family_only(fair, Mode::Exclusive)?;
            return leasing::inspect(inspect);
        }
    };
    let open = lease_open(&on.holder.backend, "lock", matches!(op, Op::Acquire { .. }))?;
    #[cfg(any(feature = "redis", feature = "etcd"))]
    let family = open.family(locking::lease(on.fair), locking::PLACE_TTL, BLOCKING)?;
    let c = Call {
        what: format!("lock {}", KeyDisplay(on.name.as_bytes())),
        key: &on.name,
        model: Concurrency::lock(),
        open,
        holder: &on.holder,
        op,
    };
    #[cfg(any(feature = "redis", feature = "etcd"))]
    if let Some(mut lock) = family {
        let mode = match mode {
            Mode::Shared => LockMode::Shared,
            Mode::Exclusive => LockMode::Exclusive,
        };
        return locking::call(&c, lock.as_mut(), mode);
    }
    family_only(on.fair, mode)?;
    call(&c)
}

/// The longest a waiter's `BLPOP` blocks: half its place's life, then it asks again.
#[cfg(any(feature = "redis", feature = "etcd"))]
const BLOCKING: Duration = Duration::from_micros(locking::PLACE_TTL / 2);

/// `--mode shared` and `--fair` need the lock family, which Redis and etcd hold.
fn family_only(fair: bool, mode: Mode) -> Result<(), Failure> {
    if fair || mode == Mode::Shared {
        return Err(Failure::Input(
            "--mode shared and --fair need --backend redis://… or etcd://… (sled holds exclusive locks)".into(),
        ));
    }
    Ok(())
}

/// `--ttl` in the core's range, in the units written.
fn ttl_flag(ttl: PolicyDuration) -> Result<Ticks, Failure> {
    sluicegate_policy::check_lease(ttl.0).map_err(|e| {
        let problem = sluicegate_policy::param_problem(&e, Style::Flags);
        Failure::Input(problem.message.replace("--lease", "--ttl"))
    })
}
