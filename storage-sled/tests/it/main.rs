//! The sled host's integration tests as one binary, each file a module.

mod common;
mod lease;
mod limiter;
mod open;
mod report;
mod sled;
