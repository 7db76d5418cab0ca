//! The middleware's integration tests as one binary, each file a module; the modules of
//! a feature's tests are compiled with it, so `cargo test -p sluicegate-tower` builds
//! without flags.

mod common;
mod concurrency;
mod http;
mod keys;
#[cfg(feature = "redis")]
mod redis;
#[cfg(feature = "remote")]
mod remote;
mod report;
