//! Where states live during a command: process memory, a sled database or Redis. Every
//! backend decides at an explicit time, so the same trace gives the same answers on each.

use std::cell::RefCell;
use std::path::Path;
use std::str::FromStr;

use tollgate_core::memory::{InMemory, KeyedLimiter};
use tollgate_core::{Algorithm, Decision, DecodeError, ManualClock, Ticks};
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

/// `--durability`: when sled writes a decision to disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SledDurability {
    /// Flush before each state-changing decision returns (one fsync each).
    EveryDecision,
    /// Let sled flush every 500 ms; a crash forgets at most the last interval.
    Background,
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
    /// After a run: a warning if the store had to forget states that were not fresh.
    fn warning(&self) -> Option<String> {
        None
    }
}

/// How a command opens its store.
#[derive(Debug, Clone)]
pub struct Open {
    /// Every stored key is `namespace + key`.
    pub namespace: String,
    /// Whether the command writes: only then may a sled database be created.
    pub writes: bool,
    pub durability: SledDurability,
    /// The memory backend's most keys held at once.
    pub max_keys: usize,
}

/// The message for memory state, which no other command can see.
pub const MEMORY_FORGETS: &str = "the memory backend keeps states only while one command runs, so there is nothing stored to inspect or reset; use --backend sled:PATH or redis://HOST";

impl Backend {
    pub fn open<A>(&self, algorithm: A, how: &Open) -> Result<Box<dyn Store<A>>, Failure>
    where
        A: Hosted,
        A::State: Send,
    {
        Ok(match self {
            Self::Memory => Box::new(MemoryStore(KeyedLimiter::with_clock(
                algorithm,
                how.max_keys,
                ManualClock::new(0),
            ))),
            Self::Sled(path) => {
                let db = open_sled(path, how.writes)?;
                let tree = db
                    .open_tree("tollgate")
                    .map_err(|e| Failure::Backend(format!("sled at {path}: {e}")))?;
                let durability = match how.durability {
                    SledDurability::EveryDecision => Durability::EveryDecision,
                    SledDurability::Background => Durability::Background,
                };
                Box::new(SledStore {
                    limiter: SledLimiter::new(tree, algorithm, durability)
                        .with_prefix(how.namespace.as_bytes()),
                    db,
                })
            }
            Self::Redis(client) => {
                let limiter = RedisLimiter::new(algorithm)
                    .map_err(|e| Failure::Input(format!("this policy cannot run on Redis: {e}")))?
                    .with_prefix(how.namespace.as_bytes());
                Box::new(RedisStore {
                    limiter,
                    con: RefCell::new(Reconnecting::new(client.clone())),
                })
            }
        })
    }
}

/// Opens the sled database at `path`: an existing one always, a new one only for a
/// command that writes and only inside an existing directory, so a mistyped path is an
/// error instead of a new empty database.
fn open_sled(path: &str, writes: bool) -> Result<sled::Db, Failure> {
    let at = Path::new(path);
    if !at.exists() {
        if !writes {
            return Err(Failure::Input(format!(
                "no database at {path} (commands that only read never create one)"
            )));
        }
        let parent = at
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        if !parent.is_dir() {
            return Err(Failure::Input(format!(
                "no database at {path}, and no directory {} to create it in",
                parent.display()
            )));
        }
    }
    sled::open(path).map_err(|e| match e {
        sled::Error::Io(ref io) if io.to_string().contains("could not acquire lock") => {
            Failure::Backend(format!(
                "the sled database at {path} is in use by another process; sled allows one process at a time"
            ))
        }
        e => Failure::Backend(format!("sled at {path}: {e}")),
    })
}

/// The memory backend: a keyed limiter on a clock the command sets to each request's time.
struct MemoryStore<A: Algorithm>(KeyedLimiter<String, A, ManualClock>);

impl<A: Algorithm> Store<A> for MemoryStore<A> {
    fn decide(&self, key: &str, now: Ticks, cost: u64) -> Result<Decision, Failure> {
        self.0.clock().set(now);
        Ok(self.0.check(key, cost))
    }

    fn peek(&self, key: &str, now: Ticks, cost: u64) -> Result<Decision, Failure> {
        self.0.clock().set(now);
        Ok(self.0.peek(key, cost))
    }

    fn reset(&self, _key: &str) -> Result<(), Failure> {
        Err(Failure::Input(MEMORY_FORGETS.into()))
    }

    fn state(&self, _key: &str) -> Result<Option<A::State>, Failure> {
        Err(Failure::Input(MEMORY_FORGETS.into()))
    }

    fn warning(&self) -> Option<String> {
        let evicted = self.0.evicted();
        (evicted > 0).then(|| {
            format!(
                "warning: more keys were limited at once than --max-keys holds; {evicted} keys were forgotten before their state was fresh (any that came back were decided as new) (raise --max-keys, or use --backend sled:PATH)"
            )
        })
    }
}

struct SledStore<A> {
    limiter: SledLimiter<A>,
    /// Flushed when the command ends, whatever the durability.
    db: sled::Db,
}

impl<A> Drop for SledStore<A> {
    fn drop(&mut self) {
        let _ = self.db.flush();
    }
}

impl<A: Algorithm> Store<A> for SledStore<A> {
    fn decide(&self, key: &str, now: Ticks, cost: u64) -> Result<Decision, Failure> {
        self.limiter
            .check_at(key.as_bytes(), now, cost)
            .map_err(sled_failure)
    }

    fn peek(&self, key: &str, now: Ticks, cost: u64) -> Result<Decision, Failure> {
        self.limiter
            .peek_at(key.as_bytes(), now, cost)
            .map_err(sled_failure)
    }

    fn reset(&self, key: &str) -> Result<(), Failure> {
        self.limiter.reset(key.as_bytes()).map_err(sled_failure)
    }

    fn state(&self, key: &str) -> Result<Option<A::State>, Failure> {
        self.limiter.state(key.as_bytes()).map_err(sled_failure)
    }
}

/// sled's errors, with keys shown as text and algorithms by name.
fn sled_failure(e: tollgate_sled::Error) -> Failure {
    match e {
        tollgate_sled::Error::Corrupt { key, source } => {
            let why = match source {
                DecodeError::WrongAlgorithm { expected, found } => format!(
                    "it holds a {} state, not a {} one",
                    algorithm_name(found),
                    algorithm_name(expected)
                ),
                other => other.to_string(),
            };
            Failure::Backend(format!(
                "the record for key {:?} is not a state of this policy: {why}",
                String::from_utf8_lossy(&key)
            ))
        }
        e => Failure::Backend(e.to_string()),
    }
}

/// The algorithm a state's tag byte names, as the canonical encoding numbers them.
fn algorithm_name(tag: u8) -> String {
    match tag {
        1 => "fixed-window".into(),
        2 => "sliding-log".into(),
        3 => "sliding-counter".into(),
        4 => "token-bucket".into(),
        5 => "leaky-bucket".into(),
        6 => "leaky-pacing".into(),
        7 => "ban".into(),
        8 => "composite".into(),
        other => format!("unknown (tag {other})"),
    }
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
