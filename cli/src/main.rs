//! `sluicegate`: simulate, replay and inspect rate limits on any host.
//!
//! Exit codes: 0 success (check: admitted; lock and lease: done), 1 check denied, or a
//! lock or lease held by another owner (acquire) or not held by this owner (release,
//! renew), 2 bad flags or input, 3 no such policy for this app, 4 backend failure
//! (unreachable, a sled database in use, or a key holding something sluicegate cannot
//! read, left as it is), 5 the output could not be written, 6 TLS refused (the Redis
//! server's certificate is not signed by a trusted CA, or names another host). Exit code
//! 5 has no message for a closed pipe.

mod args;
mod backend;
mod chart;
mod commands;
mod failure;
// The lock family is on Redis and etcd; its commands are built with sled's or Redis's.
#[cfg(all(
    any(feature = "sled", feature = "redis"),
    any(feature = "redis", feature = "etcd")
))]
mod family;
#[cfg(any(feature = "sled", feature = "redis"))]
mod leasing;
#[cfg(all(
    any(feature = "sled", feature = "redis"),
    any(feature = "redis", feature = "etcd")
))]
mod locking;
mod output;
mod rates;
mod traffic;

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

use failure::{output, Failure};

/// The static image's allocator: musl's own `malloc` serialises threads on one lock.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
#[command(
    name = "sluicegate",
    version,
    about = "Simulate, replay and inspect rate limits on any sluicegate host"
)]
#[command(
    after_help = "Exit codes: 0 success (check: admitted; lock and lease: done), 1 check denied, or a lock or lease held by another owner (acquire) or not held by this owner (release, renew), 2 bad flags or input, 3 no such policy for this app, 4 backend failure (unreachable, a sled database in use, or a key holding something sluicegate cannot read, left as it is), 5 the output could not be written, 6 TLS refused (the Redis server's certificate is not signed by a trusted CA, or names another host)."
)]
struct Cli {
    #[command(subcommand)]
    command: commands::Command,
}

fn main() -> ExitCode {
    let result = match Cli::try_parse() {
        Ok(cli) => cli.command.run(),
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
            let (code, message) = failure.exit();
            if let Some(message) = message {
                let _ = writeln!(std::io::stderr(), "sluicegate: {message}");
            }
            ExitCode::from(code)
        }
    }
}
