#![doc = include_str!("../README.md")]
#![deny(missing_docs)]
#![warn(unreachable_pub)]

mod error;
mod kv;
mod leases;
mod rwlock;
mod rwwait;
mod watch;

pub use error::Error;
pub use leases::{endpoints, EtcdLeases, DEFAULT_TIMEOUT};
pub use rwlock::EtcdRwLock;
pub use watch::EtcdLeaseGuard;
