//! The command line's integration tests (the built binary, run as a user runs it) as one
//! binary, each file a module.

mod cli;
mod common;
mod deploy;
mod fleet;
mod keys;
mod lease;
mod lock_family;
mod policy;
mod policy_file;
mod replay;
mod simulate;
