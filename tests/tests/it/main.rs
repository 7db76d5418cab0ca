//! The workspace-level integration tests as one binary, each file a module.

mod clocks;
mod lease_contract;
mod limitador;
mod sled_crash;
