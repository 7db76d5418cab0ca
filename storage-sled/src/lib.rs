#![doc = include_str!("../README.md")]
#![deny(missing_docs)]
#![warn(unreachable_pub)]

mod error;
mod lease;
mod limiter;
mod open;
mod record;

pub use error::Error;
pub use lease::SledLeases;
pub use limiter::{SledLimiter, Sweeper};
pub use open::{open, open_with, Create};
pub use record::Durability;
