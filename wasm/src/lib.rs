//! Client-side rate limiting for browsers and JS apps: tollgate's core compiled to
//! WebAssembly, with a `Limiter` for every algorithm and a `Throttle` that queues calls,
//! waits politely and obeys the server's `Retry-After` and `RateLimit` headers.
//!
//! The decisions are the core's, exact and in integer microseconds; this crate only
//! reads JS options, reads the clock at the edge and hands decisions to JS. `Limiter` is
//! two halves: [`LimiterCore`] here, and `wasm/js/limiter.js`, which the packages export
//! and which builds each decision object in JS (see [`LimiterCore`] for why).
//! Everything except the bindings in `js` is plain Rust, tested natively.
#![deny(missing_docs)]

mod feedback;
mod js;
mod limit;
mod options;
mod scheduler;
mod units;

pub use js::{LimiterCore, Throttle};

#[cfg(target_arch = "wasm32")]
#[global_allocator]
static ALLOCATOR: lol_alloc::LockedAllocator<lol_alloc::FreeListAllocator> =
    lol_alloc::LockedAllocator::new(lol_alloc::FreeListAllocator::new());
