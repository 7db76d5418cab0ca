//! A rate policy's states in a backend, its algorithm's type erased: the commands
//! decide, peek, reset, purge and inspect through one type, and this is the one place
//! that meets each algorithm's own type.

use std::fmt::Debug;

use tollgate_core::{Algorithm, Decision, Ticks};

use crate::args::Loaded;
use crate::backend::{Hosted, Open, Store};
use crate::failure::Failure;
use crate::policy::Job;

/// A rate policy's algorithm, of whatever type, ready to open its states.
pub struct Rate(Box<dyn Opens>);

impl Rate {
    /// The algorithm of `loaded`; a concurrency policy has no rate and is refused.
    pub fn of(loaded: &Loaded) -> Result<Self, Failure> {
        loaded.limiter.run(Erase, &loaded.name).map(Self)
    }

    /// Its states in the backend `open` describes.
    pub fn open(&self, open: &Open) -> Result<Box<dyn Rates>, Failure> {
        self.0.open(open)
    }
}

/// One rate policy's states in one backend.
pub trait Rates {
    fn decide(&self, key: &str, now: Ticks, cost: u64) -> Result<Decision, Failure>;
    fn peek(&self, key: &str, now: Ticks, cost: u64) -> Result<Decision, Failure>;
    fn reset(&self, key: &str) -> Result<(), Failure>;
    /// Deletes every state of the policy in its namespace; returns how many.
    fn purge(&self) -> Result<u64, Failure>;
    /// `key`'s stored state for `inspect`: its canonical encoding (`None` when fresh)
    /// and what a request of no cost would get from it at `now`.
    fn stored(&self, key: &str, now: Ticks) -> Result<(Option<Vec<u8>>, Decision), Failure>;
    /// After a run: a warning if the store had to forget states that were not fresh.
    fn warning(&self) -> Option<String>;
}

/// The job that boxes the concrete algorithm.
struct Erase;

impl Job for Erase {
    type Output = Box<dyn Opens>;
    fn run<A>(self, algorithm: A) -> Self::Output
    where
        A: Hosted,
        A::State: Debug + Send,
    {
        Box::new(algorithm)
    }
}

/// An algorithm that opens its states in a backend.
trait Opens {
    fn open(&self, open: &Open) -> Result<Box<dyn Rates>, Failure>;
}

impl<A> Opens for A
where
    A: Hosted,
    A::State: Send,
{
    fn open(&self, open: &Open) -> Result<Box<dyn Rates>, Failure> {
        Ok(Box::new(Stored {
            store: open.store(self.clone())?,
            algorithm: self.clone(),
        }))
    }
}

/// An algorithm and its store.
struct Stored<A: Algorithm> {
    algorithm: A,
    store: Box<dyn Store<A>>,
}

impl<A: Algorithm> Rates for Stored<A> {
    fn decide(&self, key: &str, now: Ticks, cost: u64) -> Result<Decision, Failure> {
        self.store.decide(key, now, cost)
    }

    fn peek(&self, key: &str, now: Ticks, cost: u64) -> Result<Decision, Failure> {
        self.store.peek(key, now, cost)
    }

    fn reset(&self, key: &str) -> Result<(), Failure> {
        self.store.reset(key)
    }

    fn purge(&self) -> Result<u64, Failure> {
        self.store.purge()
    }

    fn stored(&self, key: &str, now: Ticks) -> Result<(Option<Vec<u8>>, Decision), Failure> {
        let state = self.store.state(key)?;
        let bytes = state.as_ref().map(|s| self.algorithm.encode_to_vec(s));
        Ok((bytes, self.algorithm.peek(state, now, 0)))
    }

    fn warning(&self) -> Option<String> {
        self.store.warning()
    }
}
