#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod build;
mod duration;
pub mod envoy;
mod file;
mod model;
mod on_full;
mod problem;

pub use build::{check_lease, Built, MAX_MEMBERS};
pub use duration::{human, in_unit_of, parse_duration, short, Duration};
pub use file::{listed, load};
pub use model::{BanSpec, File, FleetSettings, Policy, STORED_FIELDS};
pub use problem::{list, list_or, param_problem, Problem, Style};
pub use sluicegate_core::memory::OnFull;
pub use sluicegate_core::Kind;
