//! Durable, embedded rate limiting: every tollgate algorithm over a [`sled::Tree`].
//!
//! [`sled::Tree`]: https://docs.rs/sled/0.34/sled/struct.Tree.html
//!
//! **One process at a time**: sled locks its database file, so while one process has a
//! database open, another process opening it gets an error ([`open`] reports it as
//! [`Error::InUse`]). Threads of the one process share it freely. To share limits
//! between processes, use one process as the server, or Redis.
//!
//! A decision is one atomic read-modify-write of one record: the key's state in the
//! core's canonical encoding, under a prefix. The transition is pure, so when another
//! thread or process changed the record in between, the decision is simply made again
//! on the new state (compare-and-swap). Composite limits are one algorithm with one
//! combined record, so they are atomic the same way, with no transaction. Leases
//! (concurrency limits and locks with fencing tokens) are [`SledLeases`], the same way.
//!
//! ```
//! use tollgate_core::{FixedWindow, SECOND};
//! use tollgate_sled::{Create, Durability, SledLimiter};
//!
//! let dir = tempfile::tempdir()?;
//! let db = tollgate_sled::open(&dir.path().join("limits"), Create::InExistingDir)?;
//! // A daily quota that survives restarts: flushed before each decision returns.
//! let quota = SledLimiter::new(
//!     db.open_tree("quotas")?,
//!     FixedWindow::new(1000, 24 * 3600 * SECOND)?,
//!     Durability::EveryDecision,
//! );
//! let decision = quota.check(b"customer-42", 1)?;
//! assert!(decision.allowed);
//! assert_eq!(decision.remaining, 999);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]

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
