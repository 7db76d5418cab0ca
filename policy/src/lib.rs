#![doc = include_str!("../README.md")]
#![deny(missing_docs)]
#![warn(unreachable_pub)]

mod build;
pub mod cel;
mod duration;
pub mod envoy;
mod file;
pub mod limitador;
mod model;
mod on_full;
mod problem;
mod selector;

pub use build::{check_lease, Built, MAX_MEMBERS};
pub use duration::{parse_duration, DurationError, PolicyDuration};
pub use file::{listed, load, FileError, Position};
pub use model::{BanSpec, FleetSettings, Policy, PolicyFile, STORED_FIELDS};
pub use problem::{param_problem, Problem, Style};
pub use selector::Selector;
pub use sluicegate_core::memory::OnFull;
pub use sluicegate_core::Kind;

/// Durations and lists as messages and charts write them for people.
pub mod text {
    pub use crate::duration::{human, in_unit_of, short};
    pub use crate::problem::{list, list_or};
}

// The paths of earlier releases, kept while callers move to `text`.
#[doc(hidden)]
pub use text::{human, in_unit_of, list, list_or, short};
