//! The core's integration tests as one binary, each file a module; the modules of a
//! feature's tests are compiled with it, so `cargo test -p sluicegate-core` builds without
//! flags.

mod anchored_window;
mod any;
mod ban;
mod build;
#[cfg(feature = "calendar")]
mod calendar_zone;
mod carry;
mod common;
mod composite;
mod drift;
mod encoding;
mod fixed_window;
mod host;
mod leaky_bucket;
mod lease;
mod lease_host;
mod memory_bytes;
mod memory_direct;
mod memory_keyed;
mod memory_keyed_rwlock;
mod memory_lease;
#[cfg(feature = "tokio")]
mod memory_lease_async;
mod memory_report;
mod memory_rwlock;
#[cfg(feature = "tokio")]
mod memory_rwlock_async;
mod memory_seed;
mod memory_wait;
#[cfg(feature = "tokio")]
mod memory_wait_async;
mod pacing;
mod refund;
mod report;
mod rwlock;
mod rwlock_in_place;
#[cfg(feature = "serde")]
mod serde;
mod share;
mod sliding_counter;
mod sliding_log;
mod token_bucket;
mod top_of_range;
