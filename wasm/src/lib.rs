#![doc = include_str!("../README.md")]
#![deny(missing_docs)]
#![warn(unreachable_pub)]

mod error;
mod feedback;
mod js;
mod limit;
mod options;
mod periods;
mod scheduler;
mod units;

pub use js::{LimiterCore, Throttle};

#[cfg(target_arch = "wasm32")]
#[global_allocator]
static ALLOCATOR: lol_alloc::LockedAllocator<lol_alloc::FreeListAllocator> =
    lol_alloc::LockedAllocator::new(lol_alloc::FreeListAllocator::new());
