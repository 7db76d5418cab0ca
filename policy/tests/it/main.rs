//! The policy model's integration tests as one binary, each file a module.

mod fields;
mod file;
mod reported;
mod rule;
mod when_key;
