//! A resource guarded by fencing tokens, as a lease-protected store should be.

use core::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

/// A value that accepts a write only with a fencing token at least as high as any it has
/// seen: the check that makes a lease safe when its holder pauses past its expiry (a
/// GC pause, a stopped process, a slow network) and writes after another holder has
/// taken over. Tests use it to count overlaps; a real store does the same check in its
/// own transaction (a `WHERE token <= $1` condition, a compare-and-set).
///
/// ```
/// use sluicegate_core::memory::{FencedResource, StaleToken};
///
/// let balance = FencedResource::new(100);
/// assert_eq!(balance.write(7, |b| { *b += 1; *b }), Ok(101));
/// // A holder whose lease expired comes back with its old token: refused.
/// assert_eq!(balance.write(6, |b| *b = 0), Err(StaleToken { token: 6, highest: 7 }));
/// assert_eq!(balance.read(|b| *b), 101);
/// ```
#[derive(Debug, Default)]
pub struct FencedResource<T> {
    inner: Mutex<Fenced<T>>,
    refused: AtomicU64,
}

#[derive(Debug, Default)]
struct Fenced<T> {
    highest: u64,
    value: T,
}

/// A write refused because a higher token has been seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("fencing token {token} is stale: token {highest} has been seen")]
pub struct StaleToken {
    /// The token the writer gave.
    pub token: u64,
    /// The highest token the resource had seen.
    pub highest: u64,
}

impl<T> FencedResource<T> {
    /// A resource holding `value`, having seen no token.
    pub const fn new(value: T) -> Self {
        Self {
            inner: Mutex::new(Fenced { highest: 0, value }),
            refused: AtomicU64::new(0),
        }
    }

    /// Applies `write` if `token` is at least the highest seen (and remembers it), else
    /// refuses it and changes nothing.
    pub fn write<R>(&self, token: u64, write: impl FnOnce(&mut T) -> R) -> Result<R, StaleToken> {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if token < inner.highest {
            self.refused.fetch_add(1, Ordering::Relaxed);
            return Err(StaleToken {
                token,
                highest: inner.highest,
            });
        }
        inner.highest = token;
        Ok(write(&mut inner.value))
    }

    /// Reads the value.
    pub fn read<R>(&self, read: impl FnOnce(&T) -> R) -> R {
        read(
            &self
                .inner
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .value,
        )
    }

    /// The highest token seen.
    pub fn highest_token(&self) -> u64 {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .highest
    }

    /// How many writes were refused as stale.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }
}
