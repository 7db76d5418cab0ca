//! A rate policy's states in a backend, with what `inspect` reads from them.

use std::ops::Deref;

use sluicegate_core::{Algorithm, AnyAlgorithm, Decision, Ticks};

use crate::args::Loaded;
use crate::backend::{Open, RateBackend};
use crate::failure::Failure;

/// A rate policy's algorithm and its states in one backend.
pub struct Rates {
    algorithm: AnyAlgorithm,
    backend: Box<dyn RateBackend>,
}

impl Rates {
    /// The states of `loaded`'s algorithm in the backend `open` describes; a concurrency
    /// policy has no rate and is refused.
    pub fn open(loaded: &Loaded, open: &Open) -> Result<Self, Failure> {
        let algorithm = loaded.rate()?.clone();
        Ok(Self {
            backend: open.rates(algorithm.clone())?,
            algorithm,
        })
    }

    /// `key`'s stored state for `inspect`: its canonical encoding (`None` when fresh)
    /// and what a request of no cost would get from it at `now`.
    pub fn stored(&self, key: &str, now: Ticks) -> Result<(Option<Vec<u8>>, Decision), Failure> {
        let state = self.backend.state(key)?;
        let bytes = state.as_ref().map(|s| self.algorithm.encode_to_vec(s));
        Ok((bytes, self.algorithm.peek(state, now, 0)))
    }
}

/// Deciding, peeking, resetting and purging are the backend's own.
impl Deref for Rates {
    type Target = dyn RateBackend;

    fn deref(&self) -> &Self::Target {
        &*self.backend
    }
}
