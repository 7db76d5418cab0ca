//! Durable, embedded rate limiting: every tollgate algorithm over a [`sled::Tree`].
//!
//! [`sled::Tree`]: https://docs.rs/sled/0.34/sled/struct.Tree.html
//!
//! **One process at a time**: sled locks its database file, so while one process has a
//! database open, another process opening it gets an error ([`open`] reports it as
//! [`Error::InUse`]). Threads of the one process share it freely. To share limits
//! between processes, use one process as the server, or Redis.
//!
//! A decision is one atomic read-modify-write of one record: the key's state in the
//! core's canonical encoding, under a prefix. The transition is pure, so when another
//! thread or process changed the record in between, the decision is simply made again
//! on the new state (compare-and-swap). Composite limits are one algorithm with one
//! combined record, so they are atomic the same way, with no transaction. Leases
//! (concurrency limits and locks with fencing tokens) are [`SledLeases`], the same way.
//!
//! ```
//! use tollgate_core::{FixedWindow, SECOND};
//! use tollgate_sled::{Create, Durability, SledLimiter};
//!
//! let dir = tempfile::tempdir()?;
//! let db = tollgate_sled::open(&dir.path().join("limits"), Create::InExistingDir)?;
//! // A daily quota that survives restarts: flushed before each decision returns.
//! let quota = SledLimiter::new(
//!     db.open_tree("quotas")?,
//!     FixedWindow::new(1000, 24 * 3600 * SECOND)?,
//!     Durability::EveryDecision,
//! );
//! let decision = quota.check(b"customer-42", 1)?;
//! assert!(decision.allowed);
//! assert_eq!(decision.remaining, 999);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use sled::{CompareAndSwapError, IVec, Tree};
use tollgate_core::{
    check_now, Algorithm, Clock, Decision, DecodeError, KeyDisplay, MonotonicClock, ParamError,
    Reserve, Ticks,
};

mod lease;
pub use lease::SledLeases;

/// What can go wrong deciding over sled.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// sled failed: I/O, a corrupt database file, or the database being closed.
    #[error("sled: {0}")]
    Storage(#[from] sled::Error),
    /// A record holds bytes no state of this algorithm encodes (written by something
    /// else, or by a limiter with other parameters). The record is left as it is. The
    /// message is worded as the Redis host's, the key shown by [`KeyDisplay`] and the
    /// reason by the core's decoder, so every host says the same of the same bytes.
    #[error("key {} holds a state tollgate cannot read: {source}", KeyDisplay(.key))]
    Corrupt {
        /// The key as given (without the prefix).
        key: Vec<u8>,
        /// Why the bytes were refused.
        source: DecodeError,
    },
    /// A time given by the caller is beyond [`MAX_TICKS`](https://docs.rs/tollgate-core/0.1/tollgate_core/constant.MAX_TICKS.html)
    /// (see [`check_now`](https://docs.rs/tollgate-core/0.1/tollgate_core/fn.check_now.html)): nothing was decided.
    #[error("{0}")]
    Time(ParamError),
    /// A lease call that cannot be carried out (bad owner or ttl, a lease not held by
    /// that owner): nothing was changed.
    #[error("{0}")]
    Lease(#[from] tollgate_core::LeaseError),
    /// Another process has the database open: sled allows one process at a time.
    #[error("the sled database at {} is in use by another process (sled allows one process at a time)", .path.display())]
    InUse {
        /// The database's directory.
        path: PathBuf,
    },
    /// [`open`] was asked not to create a database, and there is none at the path.
    #[error("no sled database at {}", .path.display())]
    NotFound {
        /// The path given.
        path: PathBuf,
    },
    /// [`open`] was asked to create a database where the parent directory is missing.
    #[error("cannot create a sled database at {}: the directory {} does not exist", .path.display(), .parent.display())]
    NoParentDir {
        /// The path given.
        path: PathBuf,
        /// Its parent directory, which does not exist.
        parent: PathBuf,
    },
}

/// Whether [`open`] may create a database that does not exist yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Create {
    /// Never: a missing database is [`Error::NotFound`], and nothing is created (for
    /// commands that only read).
    Never,
    /// Create the database's directory if its parent directory exists, else
    /// [`Error::NoParentDir`] (a mistyped path is not silently created).
    InExistingDir,
}

/// Opens the sled database at `path`, with typed errors for what a user meets: the
/// database in use by another process ([`Error::InUse`]), no database there
/// ([`Error::NotFound`], with [`Create::Never`]), or a missing parent directory
/// ([`Error::NoParentDir`]).
pub fn open(path: &Path, create: Create) -> Result<sled::Db, Error> {
    open_with(sled::Config::new().path(path), create)
}

/// [`open`] with sled's other settings from `config` (its path included).
pub fn open_with(config: sled::Config, create: Create) -> Result<sled::Db, Error> {
    let path = config.path.clone();
    // sled keeps its settings in `conf` beside its data: a database has one.
    if !path.join("conf").is_file() {
        match create {
            Create::Never => return Err(Error::NotFound { path }),
            Create::InExistingDir => {
                let parent = match path.parent() {
                    Some(p) if p.as_os_str().is_empty() => Path::new("."),
                    Some(p) => p,
                    None => Path::new("/"),
                };
                if !parent.is_dir() {
                    let parent = parent.to_path_buf();
                    return Err(Error::NoParentDir { path, parent });
                }
            }
        }
    }
    config.open().map_err(|e| match e {
        // sled 0.34 reports its file lock held elsewhere only as this text.
        sled::Error::Io(io) if io.to_string().starts_with("could not acquire lock") => {
            Error::InUse { path }
        }
        e => Error::Storage(e),
    })
}

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

/// One algorithm's limits over a sled tree, a record per key.
#[derive(Debug, Clone)]
pub struct SledLimiter<A, C = MonotonicClock> {
    tree: Tree,
    algorithm: A,
    prefix: Vec<u8>,
    durability: Durability,
    clock: C,
}

impl<A: Algorithm> SledLimiter<A> {
    /// A limiter over `tree`, with no key prefix, on the process's
    /// [`MonotonicClock`](https://docs.rs/tollgate-core/0.1/tollgate_core/struct.MonotonicClock.html).
    pub fn new(tree: Tree, algorithm: A, durability: Durability) -> Self {
        Self {
            tree,
            algorithm,
            prefix: Vec::new(),
            durability,
            clock: MonotonicClock::new(),
        }
    }
}

impl<A: Algorithm, C: Clock> SledLimiter<A, C> {
    /// Stores every key under `prefix`, so several limiters can share one tree.
    /// [`collect_expired`](Self::collect_expired) only touches keys under it.
    pub fn with_prefix(self, prefix: impl Into<Vec<u8>>) -> Self {
        Self {
            prefix: prefix.into(),
            ..self
        }
    }

    /// Reads time from `clock` instead.
    pub fn with_clock<D: Clock>(self, clock: D) -> SledLimiter<A, D> {
        SledLimiter {
            tree: self.tree,
            algorithm: self.algorithm,
            prefix: self.prefix,
            durability: self.durability,
            clock,
        }
    }

    /// Decides a request of `cost` for `key` now.
    pub fn check(&self, key: &[u8], cost: u64) -> Result<Decision, Error> {
        self.check_at(key, self.clock.now(), cost)
    }

    /// Decides a request of `cost` for `key` at `now` (replays, tests, a shared clock).
    /// A `now` beyond [`MAX_TICKS`](https://docs.rs/tollgate-core/0.1/tollgate_core/constant.MAX_TICKS.html) is [`Error::Time`].
    pub fn check_at(&self, key: &[u8], now: Ticks, cost: u64) -> Result<Decision, Error> {
        let now = check_now(now).map_err(Error::Time)?;
        self.update(key, |state| self.algorithm.decide(state, now, cost))
    }

    /// What a request of `cost` for `key` would get at `now`, changing nothing.
    /// A `now` beyond [`MAX_TICKS`](https://docs.rs/tollgate-core/0.1/tollgate_core/constant.MAX_TICKS.html) is [`Error::Time`].
    pub fn peek_at(&self, key: &[u8], now: Ticks, cost: u64) -> Result<Decision, Error> {
        let now = check_now(now).map_err(Error::Time)?;
        Ok(self.algorithm.peek(self.state(key)?, now, cost))
    }

    /// The stored state of `key`, decoded.
    pub fn state(&self, key: &[u8]) -> Result<Option<A::State>, Error> {
        let record = self.tree.get(self.record_key(key))?;
        record
            .map(|bytes| self.algorithm.decode(&bytes).map_err(|e| corrupt(key, e)))
            .transpose()
    }

    /// Forgets `key`: its next request finds it fresh. Only a record holding a state of
    /// this algorithm is deleted: anything else is [`Error::Corrupt`] and left as it is.
    pub fn reset(&self, key: &[u8]) -> Result<(), Error> {
        self.update(key, |_| ((), None))
    }

    /// Removes the records under this limiter's prefix whose state is fresh at `now`,
    /// returning how many. A record that does not decode is left for an operator (and
    /// reported by [`state`](Self::state)); it does not stop the sweep. A `now` beyond
    /// [`MAX_TICKS`](https://docs.rs/tollgate-core/0.1/tollgate_core/constant.MAX_TICKS.html) is [`Error::Time`].
    pub fn collect_expired(&self, now: Ticks) -> Result<usize, Error> {
        let now = check_now(now).map_err(Error::Time)?;
        self.sweep(|state| self.algorithm.decide(Some(state), now, 0).1.is_none())
    }

    /// Deletes every state of this algorithm under the limiter's prefix, fresh or not,
    /// returning how many: the clean-up after a replay or a test. Records holding
    /// anything else (another algorithm's state, an application's value) stay.
    pub fn purge(&self) -> Result<usize, Error> {
        self.sweep(|_| true)
    }

    /// Deletes the records under the prefix that decode as this algorithm's state and
    /// that `doomed` picks, each by compare-and-swap, so a record changed meanwhile stays.
    fn sweep(&self, doomed: impl Fn(A::State) -> bool) -> Result<usize, Error> {
        let mut removed = 0;
        for record in self.tree.scan_prefix(&self.prefix) {
            let (record_key, bytes) = record?;
            let Ok(state) = self.algorithm.decode(&bytes) else {
                continue;
            };
            if doomed(state)
                && self
                    .tree
                    .compare_and_swap(&record_key, Some(&bytes), None::<&[u8]>)?
                    .is_ok()
            {
                removed += 1;
            }
        }
        if removed > 0 {
            flush_if(&self.tree, self.durability)?;
        }
        Ok(removed)
    }

    /// The algorithm deciding.
    pub const fn algorithm(&self) -> &A {
        &self.algorithm
    }

    /// The tree the records live in.
    pub const fn tree(&self) -> &Tree {
        &self.tree
    }

    fn record_key(&self, key: &[u8]) -> Vec<u8> {
        [self.prefix.as_slice(), key].concat()
    }

    /// Applies `transition` to `key`'s record atomically (see [`swap`]).
    fn update<T>(
        &self,
        key: &[u8],
        transition: impl Fn(Option<A::State>) -> (T, Option<A::State>),
    ) -> Result<T, Error> {
        swap(
            &self.tree,
            &self.record_key(key),
            self.durability,
            |bytes| self.algorithm.decode(bytes).map_err(|e| corrupt(key, e)),
            |state| self.algorithm.encode_to_vec(state),
            |state| Ok(transition(state)),
        )
    }
}

fn corrupt(key: &[u8], source: DecodeError) -> Error {
    Error::Corrupt {
        key: key.to_vec(),
        source,
    }
}

fn flush_if(tree: &Tree, durability: Durability) -> Result<(), Error> {
    if durability == Durability::EveryDecision {
        tree.flush()?;
    }
    Ok(())
}

/// One record's atomic read-modify-write, shared by the limiters and the leases: read,
/// decode, apply the pure `transition`, and swap in the new encoding (or delete the
/// record when the state is fresh) only if the record is still what was read; else
/// decide again on what is there now. A record that does not decode, or a transition
/// that fails, changes nothing.
fn swap<S, T>(
    tree: &Tree,
    record_key: &[u8],
    durability: Durability,
    decode: impl Fn(&[u8]) -> Result<S, Error>,
    encode: impl Fn(&S) -> Vec<u8>,
    transition: impl Fn(Option<S>) -> Result<(T, Option<S>), Error>,
) -> Result<T, Error> {
    let mut current: Option<IVec> = tree.get(record_key)?;
    loop {
        let state = current.as_deref().map(&decode).transpose()?;
        let (answer, next) = transition(state)?;
        let next = next.map(|s| encode(&s));
        if next.as_deref() == current.as_deref() {
            return Ok(answer);
        }
        match tree.compare_and_swap(record_key, current.as_ref(), next)? {
            Ok(()) => {
                flush_if(tree, durability)?;
                return Ok(answer);
            }
            Err(CompareAndSwapError {
                current: actual, ..
            }) => current = actual,
        }
    }
}

impl<A: Reserve, C: Clock> SledLimiter<A, C> {
    /// Books a slot for `cost` for `key` at `now` if it can act within `max_wait` ticks.
    /// A `now` beyond [`MAX_TICKS`](https://docs.rs/tollgate-core/0.1/tollgate_core/constant.MAX_TICKS.html) is [`Error::Time`].
    pub fn reserve_at(
        &self,
        key: &[u8],
        now: Ticks,
        cost: u64,
        max_wait: Ticks,
    ) -> Result<Decision, Error> {
        let now = check_now(now).map_err(Error::Time)?;
        self.update(key, |state| {
            self.algorithm.reserve(state, now, cost, max_wait)
        })
    }
}

impl<A, C> SledLimiter<A, C>
where
    A: Algorithm + Clone + Send + 'static,
    C: Clock + Clone + Send + 'static,
{
    /// Runs [`collect_expired`](Self::collect_expired) every `interval` on a background
    /// thread until the returned [`Sweeper`] is dropped.
    pub fn spawn_sweeper(&self, interval: Duration) -> Sweeper {
        let limiter = self.clone();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            while !stopped.load(Ordering::Acquire) {
                // A failed sweep is retried at the next interval; decisions report errors.
                let _ = limiter.collect_expired(limiter.clock.now());
                std::thread::park_timeout(interval);
            }
        });
        Sweeper {
            stop,
            thread: Some(thread),
        }
    }
}

/// A background sweeper; dropping it stops the thread and waits for it.
#[derive(Debug)]
pub struct Sweeper {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Sweeper {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            let _ = thread.join();
        }
    }
}
