//! The policy model shared by policy files, the command line and the service: the
//! schema, durations like `"250ms"`, the algorithm each policy builds (the core's
//! [`AnyAlgorithm`](tollgate_core::AnyAlgorithm)), and problems that name the field at
//! fault.
//!
//! A policy names an `algorithm` and its parameters, optionally a `ban` around it, and
//! its metadata (`apps`, `description`, `owner`). `algorithm = "composite"` takes
//! `limits`, a list of member policies decided atomically on one key.
//!
//! ```
//! use tollgate_policy::{Built, File, Style};
//!
//! let file = File::parse("policies.toml", r#"
//!     [policies.api]
//!     algorithm = "token-bucket"
//!     capacity = 10
//!     rate = 5
//!     period = "1s"
//! "#)?;
//! let built = file.policies["api"].build(Style::File).map_err(|p| p.message)?;
//! assert!(matches!(built, Built::Rule(_)));
//! # Ok::<(), String>(())
//! ```
#![deny(missing_docs)]

mod build;
mod duration;
mod file;
mod model;
mod problem;

pub use build::{check_lease, Built, MAX_MEMBERS};
pub use duration::{human, in_unit_of, parse_duration, short, Duration};
pub use file::load;
pub use model::{BanSpec, File, FleetSettings, Policy, STORED_FIELDS};
pub use problem::{list, list_or, param_problem, Problem, Style};
pub use tollgate_core::Kind;
