//! In-process leases: a guard per lease that releases it on drop, and waiters woken when
//! a lease is freed or expires.

mod direct;
mod error;
mod guard;
mod keyed;
mod slots;
mod wait;

pub use direct::Leases;
pub use error::AcquireError;
pub use guard::LeaseGuard;
pub use keyed::KeyedLeases;
