//! Where a host keeps its records and how it changes them: one record per key under a
//! prefix, each change one atomic read-modify-write. The limiters and the leases both
//! stand on it, so they store, race and flush the same way.

use sled::{CompareAndSwapError, IVec, Tree};
use sluicegate_core::{DecodeError, MonotonicClock};

use crate::error::{corrupt, Error};

/// When a decision's new state reaches the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Durability {
    /// Flush before a state-changing decision returns: after a crash, nothing admitted
    /// is forgotten. Costs one fsync per admission.
    EveryDecision,
    /// Leave flushing to sled's background flusher (`sled::Config::flush_every_ms`,
    /// 500 ms by default). After a crash, the changes of at most the last flush
    /// interval are lost, so a key may be admitted again up to what its limit admits in
    /// that interval (for a bucket: the interval's refill, plus the burst if it was full).
    Background,
}

/// A tree, the prefix of its keys, when changes reach the disk, and the clock decisions
/// read.
#[derive(Debug, Clone)]
pub(crate) struct Records<C> {
    tree: Tree,
    prefix: Vec<u8>,
    durability: Durability,
    pub(crate) clock: C,
}

impl Records<MonotonicClock> {
    /// Records over `tree`, with no key prefix, on the process's monotonic clock.
    pub(crate) fn new(tree: Tree, durability: Durability) -> Self {
        Self {
            tree,
            prefix: Vec::new(),
            durability,
            clock: MonotonicClock::new(),
        }
    }
}

impl<C> Records<C> {
    pub(crate) fn with_prefix(self, prefix: Vec<u8>) -> Self {
        Self { prefix, ..self }
    }

    pub(crate) fn with_clock<D>(self, clock: D) -> Records<D> {
        Records {
            tree: self.tree,
            prefix: self.prefix,
            durability: self.durability,
            clock,
        }
    }

    pub(crate) const fn tree(&self) -> &Tree {
        &self.tree
    }

    pub(crate) fn prefix(&self) -> &[u8] {
        &self.prefix
    }

    fn record_key(&self, key: &[u8]) -> Vec<u8> {
        [self.prefix.as_slice(), key].concat()
    }

    /// The record of `key`, decoded (`None`: there is none).
    pub(crate) fn read<S>(
        &self,
        key: &[u8],
        decode: impl Fn(&[u8]) -> Result<S, DecodeError>,
    ) -> Result<Option<S>, Error> {
        let record = self.tree.get(self.record_key(key))?;
        record
            .map(|bytes| decode(&bytes).map_err(|e| corrupt(key, e)))
            .transpose()
    }

    /// Flushes when every change must reach the disk before it is answered.
    pub(crate) fn flush(&self) -> Result<(), Error> {
        if self.durability == Durability::EveryDecision {
            self.tree.flush()?;
        }
        Ok(())
    }

    /// One record's atomic read-modify-write: read, decode, apply the pure `transition`,
    /// and swap in the new encoding (or delete the record when the state is fresh) only
    /// if the record is still what was read; else decide again on what is there now. A
    /// record that does not decode, or a transition that fails, changes nothing.
    pub(crate) fn update<S, T>(
        &self,
        key: &[u8],
        decode: impl Fn(&[u8]) -> Result<S, DecodeError>,
        encode: impl Fn(&S) -> Vec<u8>,
        transition: impl Fn(Option<S>) -> Result<(T, Option<S>), Error>,
    ) -> Result<T, Error> {
        let record_key = self.record_key(key);
        let mut current: Option<IVec> = self.tree.get(&record_key)?;
        loop {
            let state = current.as_deref().map(&decode).transpose();
            let (answer, next) = transition(state.map_err(|e| corrupt(key, e))?)?;
            let next = next.map(|s| encode(&s));
            if next.as_deref() == current.as_deref() {
                return Ok(answer);
            }
            match self
                .tree
                .compare_and_swap(&record_key, current.as_ref(), next)?
            {
                Ok(()) => {
                    self.flush()?;
                    return Ok(answer);
                }
                Err(CompareAndSwapError {
                    current: actual, ..
                }) => current = actual,
            }
        }
    }
}
