//! Where states live during a command: process memory, a sled database or Redis. Every
//! backend decides at an explicit time, so the same trace gives the same answers on each.

use std::cell::RefCell;
use std::str::FromStr;

use tollgate_core::memory::{InMemory, KeyedLimiter};
use tollgate_core::{Algorithm, Decision, ManualClock, Ticks};
use tollgate_redis::{LuaAlgorithm, Reconnecting, RedisLimiter};
use tollgate_sled::{Durability, SledLimiter};

use crate::Failure;

/// `--backend`: `memory`, `sled:PATH`, `redis://HOST[:PORT][/DB]`.
#[derive(Debug, Clone)]
pub enum Backend {
    Memory,
    Sled(String),
    /// Parsed when the flag is read, so a bad URL is a flag error.
    Redis(redis::Client),
}

/// An algorithm every backend holds: in process memory, in sled and in Redis.
pub trait Hosted: InMemory + LuaAlgorithm + Clone + Send + Sync + 'static {}
impl<A: InMemory + LuaAlgorithm + Clone + Send + Sync + 'static> Hosted for A {}

impl FromStr for Backend {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        if text == "memory" {
            Ok(Self::Memory)
        } else if let Some(path) = text.strip_prefix("sled:").filter(|p| !p.is_empty()) {
            Ok(Self::Sled(path.to_owned()))
        } else if text.starts_with("redis://") {
            redis::Client::open(text)
                .map(Self::Redis)
                .map_err(|e| format!("bad Redis URL {text:?}: {e}"))
        } else {
            Err(format!(
                "unknown backend {text:?}: use memory, sled:PATH or redis://HOST[:PORT]"
            ))
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
        A: Hosted,
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
            Self::Redis(client) => {
                let limiter = RedisLimiter::new(algorithm)
                    .map_err(|e| Failure::Input(format!("this policy cannot run on Redis: {e}")))?;
                Box::new(RedisStore {
                    limiter,
                    con: RefCell::new(Reconnecting::new(client.clone())),
                })
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
            "inspect needs a stored backend (sled:PATH or redis://); memory forgets at exit".into(),
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

/// A Redis limiter and its one connection (a command runs on one thread).
struct RedisStore<A: LuaAlgorithm> {
    limiter: RedisLimiter<A>,
    con: RefCell<Reconnecting>,
}

impl<A: LuaAlgorithm> Store<A> for RedisStore<A> {
    fn decide(&self, key: &str, now: Ticks, cost: u64) -> Result<Decision, Failure> {
        let con = &mut *self.con.borrow_mut();
        self.limiter
            .check_at(con, key.as_bytes(), cost, now)
            .map_err(redis_failure)
    }

    /// The scripts only decide, so a peek reads the stored state and lets the core
    /// answer: the same math, nothing written.
    fn peek(&self, key: &str, now: Ticks, cost: u64) -> Result<Decision, Failure> {
        let state = self.state(key)?;
        Ok(self.limiter.algorithm().peek(state, now, cost))
    }

    fn reset(&self, key: &str) -> Result<(), Failure> {
        let con = &mut *self.con.borrow_mut();
        self.limiter
            .reset(con, key.as_bytes())
            .map_err(redis_failure)
    }

    fn state(&self, key: &str) -> Result<Option<A::State>, Failure> {
        let con = &mut *self.con.borrow_mut();
        self.limiter
            .state(con, key.as_bytes())
            .map_err(redis_failure)
    }
}

fn redis_failure(e: tollgate_redis::Error) -> Failure {
    match e {
        e @ tollgate_redis::Error::OutOfRange { .. } => Failure::Input(e.to_string()),
        e => Failure::Backend(e.to_string()),
    }
}
