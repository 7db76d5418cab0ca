#![doc = include_str!("../README.md")]
// std natively (the tests, and the cdylib a native build also links), none in the modules.
#![cfg_attr(target_arch = "wasm32", no_std)]
#![deny(missing_docs)]
#![warn(unreachable_pub)]

extern crate alloc;

mod error;
mod js;
mod limit;
mod options;
#[cfg(feature = "full")]
mod periods;
mod scheduler;
mod units;

pub use js::{decide, wasm_memory, LimiterCore};

#[cfg(target_arch = "wasm32")]
#[global_allocator]
static ALLOCATOR: lol_alloc::LockedAllocator<lol_alloc::FreeListAllocator> =
    lol_alloc::LockedAllocator::new(lol_alloc::FreeListAllocator::new());

/// Never reached on valid or invalid input (errors are values); without std's handler,
/// no formatting machinery is linked. The calendar feature links std, which has one.
#[cfg(all(target_arch = "wasm32", not(feature = "calendar")))]
#[panic_handler]
fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
    core::arch::wasm32::unreachable()
}
