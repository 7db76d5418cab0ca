//! The module's integration tests as one binary, each file a module.

mod commands;
mod common;
mod differential;
