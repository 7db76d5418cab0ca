//! Where states live during a command: process memory or a sled database. Every backend
//! decides at an explicit time, so the same trace gives the same answers on each.

use std::str::FromStr;

use tollgate_core::memory::{InMemory, KeyedLimiter};
use tollgate_core::{Algorithm, Decision, ManualClock, Ticks};
use tollgate_sled::{Durability, SledLimiter};

use crate::Failure;

/// `--backend`: `memory`, `sled:PATH`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backend {
    Memory,
    Sled(String),
}

impl FromStr for Backend {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        if text == "memory" {
            Ok(Self::Memory)
        } else if let Some(path) = text.strip_prefix("sled:").filter(|p| !p.is_empty()) {
            Ok(Self::Sled(path.to_owned()))
        } else if text.starts_with("redis://") {
            Err("the Redis backend is not in this build yet (tollgate-redis has not landed); use memory or sled:PATH".into())
        } else {
            Err(format!("unknown backend {text:?}: use memory or sled:PATH"))
        }
    }
}

/// One algorithm's states in one backend.
pub trait Store<A: Algorithm> {
    fn decide(&self, key: &str, now: Ticks, cost: u64) -> Result<Decision, Failure>;
    fn peek(&self, key: &str, now: Ticks, cost: u64) -> Result<Decision, Failure>;
    fn reset(&self, key: &str) -> Result<(), Failure>;
    /// The stored state, decoded, for `inspect`.
    fn state(&self, key: &str) -> Result<Option<A::State>, Failure>;
}

impl Backend {
    pub fn open<A>(&self, algorithm: A) -> Result<Box<dyn Store<A>>, Failure>
    where
        A: Algorithm + InMemory + Clone + Send + Sync + 'static,
        A::State: Send,
    {
        Ok(match self {
            // A simulation may touch millions of keys; they are all kept.
            Self::Memory => Box::new(KeyedLimiter::with_clock(
                algorithm,
                usize::MAX >> 8,
                ManualClock::new(0),
            )),
            Self::Sled(path) => {
                let db = sled::open(path)
                    .map_err(|e| Failure::Backend(format!("sled at {path}: {e}")))?;
                let tree = db
                    .open_tree("tollgate")
                    .map_err(|e| Failure::Backend(e.to_string()))?;
                Box::new(SledLimiter::new(tree, algorithm, Durability::EveryDecision))
            }
        })
    }
}

impl<A: Algorithm> Store<A> for KeyedLimiter<String, A, ManualClock> {
    fn decide(&self, key: &str, now: Ticks, cost: u64) -> Result<Decision, Failure> {
        self.clock().set(now);
        Ok(self.check(key, cost))
    }

    fn peek(&self, key: &str, now: Ticks, cost: u64) -> Result<Decision, Failure> {
        self.clock().set(now);
        Ok(KeyedLimiter::peek(self, key, cost))
    }

    fn reset(&self, key: &str) -> Result<(), Failure> {
        KeyedLimiter::reset(self, key);
        Ok(())
    }

    fn state(&self, _key: &str) -> Result<Option<A::State>, Failure> {
        Err(Failure::Input(
            "inspect needs a stored backend (sled:PATH); memory forgets at exit".into(),
        ))
    }
}

impl<A: Algorithm> Store<A> for SledLimiter<A> {
    fn decide(&self, key: &str, now: Ticks, cost: u64) -> Result<Decision, Failure> {
        self.check_at(key.as_bytes(), now, cost)
            .map_err(sled_failure)
    }

    fn peek(&self, key: &str, now: Ticks, cost: u64) -> Result<Decision, Failure> {
        self.peek_at(key.as_bytes(), now, cost)
            .map_err(sled_failure)
    }

    fn reset(&self, key: &str) -> Result<(), Failure> {
        SledLimiter::reset(self, key.as_bytes()).map_err(sled_failure)
    }

    fn state(&self, key: &str) -> Result<Option<A::State>, Failure> {
        SledLimiter::state(self, key.as_bytes()).map_err(sled_failure)
    }
}

fn sled_failure(e: tollgate_sled::Error) -> Failure {
    Failure::Backend(e.to_string())
}
