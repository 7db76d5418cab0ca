//! In-process limiting: a [`DirectLimiter`] for one shared limit and a [`KeyedLimiter`]
//! for a limit per user, IP or route, both reading a [`Clock`](crate::Clock) at the edge and deciding
//! with the pure algorithms; [`Leases`] and [`KeyedLeases`] for concurrency limits and
//! locks, whose guards carry fencing tokens a [`FencedResource`] checks; [`RwLeases`] for
//! read-write and fair locks whose releases wake one waiter, [`KeyedRwLeases`] for one
//! per key.
//!
//! ```
//! use std::time::Duration;
//! use sluicegate_core::memory::{DirectLimiter, KeyedLimiter};
//! use sluicegate_core::{FixedWindow, TokenBucket, SECOND};
//!
//! // One shared limit: 100 requests at once, refilled at 100 per second.
//! let api = DirectLimiter::new(TokenBucket::new(100, 100, SECOND)?);
//! assert!(api.check(1).allowed);
//! // Wait in line for up to 50 ms rather than fail.
//! assert!(api.acquire(1, Duration::from_millis(50)).is_ok());
//!
//! // A limit per user, holding at most 10 000 users.
//! let per_user = KeyedLimiter::new(FixedWindow::new(10, SECOND)?, 10_000);
//! assert!(per_user.check(&"alice", 1).allowed);
//! # Ok::<(), sluicegate_core::ParamError>(())
//! ```

mod cell;
mod direct;
mod fenced;
mod keyed;
mod keyed_rwlock;
mod lease;
mod lease_table;
mod rwlock;
mod turn;
mod wait;
mod word;

pub(crate) use cell::split_word;
pub use cell::InMemory;
pub use direct::DirectLimiter;
pub use fenced::{FencedResource, StaleToken};
pub use keyed::{KeyedLimiter, OnFull};
pub use keyed_rwlock::KeyedRwLeases;
pub use lease::{AcquireError, KeyedLeases, LeaseGuard, Leases};
pub use rwlock::{RwAcquireError, RwGuard, RwLeases};
pub use turn::WaitCancel;

/// The cells an [`InMemory`] algorithm keeps its state in: named by that trait and
/// measured by the benches, not an interface to build on.
#[doc(hidden)]
pub mod __bench {
    pub use super::cell::{
        AtomicCell, BucketCell, LockedCell, NarrowCell, StateCell, WordState, WordUnits,
    };
}

/// How [`KeyedLimiter`] and [`KeyedLeases`] hash keys by default: foldhash's quality
/// hasher, seeded at random per process, so a client that does not know the seed cannot
/// choose keys that collide. On a short key (an address, an id) it costs a fifth of
/// SipHash (std's and governor's default), a fifth of a decision on the 100 000-key
/// bench. A limiter keyed by clients who can time it at length to learn the seed can
/// take SipHash with `with_hasher(.., std::hash::RandomState::new())`.
pub type KeyHasher = foldhash::quality::RandomState;
