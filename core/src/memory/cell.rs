//! How a direct limiter holds its one state: one atomic word where it fits, else a lock.

use core::marker::PhantomData;
use core::sync::atomic::Ordering;
use std::sync::{Mutex, PoisonError};

use portable_atomic::AtomicU128;

use crate::{
    Algorithm, Ban, BucketState, Decision, FixedWindow, FixedWindowState, LeakyBucket, Pacing,
    SlidingCounter, SlidingCounterState, SlidingLog, TokenBucket,
};

/// A state that fits one 128-bit word, so a limiter updates it with one compare-and-swap.
pub trait WordState: Sized {
    /// The state as a word; never zero, which stands for the fresh state.
    fn to_word(self) -> u128;
    /// The state [`to_word`](Self::to_word) returned; `None` for zero.
    fn from_word(word: u128) -> Option<Self>;
}

/// The high and low 64-bit halves of a word.
pub(crate) fn split_word(word: u128) -> (u64, u64) {
    let high = u64::try_from(word >> 64).unwrap_or(0);
    let low = u64::try_from(word & u128::from(u64::MAX)).unwrap_or(0);
    (high, low)
}

/// A place holding one state that many threads update.
pub trait StateCell<S>: Default + Send + Sync {
    /// Replaces the state with the one `transition` returns, atomically, and returns the
    /// decision. `transition` may run more than once (it is pure, so that is safe).
    fn update(&self, transition: impl FnMut(Option<S>) -> (Decision, Option<S>)) -> Decision;
    /// The current state.
    fn load(&self) -> Option<S>;
    /// Forgets the state: the next request finds it fresh.
    fn clear(&self);
}

/// An algorithm whose state an in-memory limiter can hold, and how.
pub trait InMemory: Algorithm {
    /// The cell a [`DirectLimiter`](super::DirectLimiter) keeps the state in.
    type Cell: StateCell<Self::State>;
}

/// A state in one atomic 128-bit word, updated by compare-and-swap: no lock, and a
/// reader never waits for a writer.
#[derive(Debug)]
pub struct AtomicCell<S> {
    word: AtomicU128,
    state: PhantomData<fn() -> S>,
}

impl<S> Default for AtomicCell<S> {
    fn default() -> Self {
        Self {
            word: AtomicU128::new(0),
            state: PhantomData,
        }
    }
}

impl<S: WordState> StateCell<S> for AtomicCell<S> {
    fn update(&self, mut transition: impl FnMut(Option<S>) -> (Decision, Option<S>)) -> Decision {
        let mut current = self.word.load(Ordering::Acquire);
        loop {
            let (decision, next) = transition(S::from_word(current));
            let next = next.map_or(0, S::to_word);
            if next == current {
                return decision;
            }
            match self
                .word
                .compare_exchange(current, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return decision,
                Err(actual) => current = actual,
            }
        }
    }

    fn load(&self) -> Option<S> {
        S::from_word(self.word.load(Ordering::Acquire))
    }

    fn clear(&self) {
        self.word.store(0, Ordering::Release);
    }
}

/// A state behind a mutex, for states too big for a word (the sliding log, the ban).
#[derive(Debug)]
pub struct LockedCell<S>(Mutex<Option<S>>);

impl<S> Default for LockedCell<S> {
    fn default() -> Self {
        Self(Mutex::new(None))
    }
}

impl<S: Clone + Send> StateCell<S> for LockedCell<S> {
    fn update(&self, mut transition: impl FnMut(Option<S>) -> (Decision, Option<S>)) -> Decision {
        // A transition cannot panic while holding the lock, but a poisoned lock must not
        // turn every later request into a panic either.
        let mut state = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let (decision, next) = transition(state.take());
        *state = next;
        decision
    }

    fn load(&self) -> Option<S> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn clear(&self) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }
}

impl InMemory for TokenBucket {
    type Cell = AtomicCell<BucketState>;
}
impl InMemory for LeakyBucket {
    type Cell = AtomicCell<BucketState>;
}
impl InMemory for Pacing {
    type Cell = AtomicCell<BucketState>;
}
impl InMemory for FixedWindow {
    type Cell = AtomicCell<FixedWindowState>;
}
impl InMemory for SlidingCounter {
    type Cell = AtomicCell<SlidingCounterState>;
}
impl InMemory for SlidingLog {
    type Cell = LockedCell<Self::State>;
}
impl<A: Algorithm> InMemory for Ban<A>
where
    A::State: Send,
{
    type Cell = LockedCell<Self::State>;
}
impl<A: Algorithm> InMemory for crate::Composite<A>
where
    A::State: Send,
{
    type Cell = LockedCell<Self::State>;
}
