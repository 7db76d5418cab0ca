#![doc = include_str!("../README.md")]
#![deny(missing_docs)]
#![warn(unreachable_pub)]

mod error;
mod leases;
mod watch;

pub use error::Error;
pub use leases::{endpoints, EtcdLeases, DEFAULT_TIMEOUT};
pub use watch::EtcdLeaseGuard;
