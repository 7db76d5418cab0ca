//! Where states live during a command: process memory, a sled database or Redis (and,
//! for locks and leases only, etcd). Every backend decides at an explicit time, so the
//! same trace gives the same answers on each.

#[cfg(feature = "sled")]
use std::path::Path;
#[cfg(feature = "sled")]
use std::time::Instant;

use sluicegate_core::memory::{KeyedLimiter, OnFull};
#[cfg(feature = "etcd")]
use sluicegate_core::AsyncLeaseHost;
#[cfg(any(feature = "sled", feature = "redis", feature = "etcd"))]
use sluicegate_core::{
    Acquired, Clock, Concurrency, Grant, LeaseError, LeaseHost, LeaseRequest, LeaseState,
    MonotonicClock, Ticks,
};
use sluicegate_core::{
    AnyAlgorithm, AnyState, Decision, Limiter, ManualClock, ParamError, ReportRequest, Reported,
    Reporter, Request,
};
#[cfg(feature = "etcd")]
use sluicegate_etcd::EtcdLeases;
#[cfg(feature = "redis")]
use sluicegate_redis::{Connected, Reconnecting, RedisLeases, RedisLimiter, Sentinel};
#[cfg(feature = "sled")]
use sluicegate_sled::{Create, Durability, SledLeases, SledLimiter};

use crate::Failure;

/// `--backend`: `memory`, `sled:PATH`, `redis://HOST[:PORT][/DB]` or `rediss://` (TLS),
/// `redis+sentinel://` or `rediss+sentinel://` (a primary under Redis Sentinel), or for
/// locks and leases `etcd://HOST:PORT[,HOST:PORT…]`.
#[derive(Debug, Clone)]
pub enum Backend {
    Memory,
    #[cfg(feature = "sled")]
    Sled(String),
    /// The server or the sentinels, trusting the `--redis-ca` certificates if given
    /// (boxed: it holds the TLS configuration).
    #[cfg(feature = "redis")]
    Redis(Box<RedisTarget>),
    /// The cluster's endpoints, `http://HOST:PORT`.
    #[cfg(feature = "etcd")]
    Etcd(Vec<String>),
}

/// Where a Redis backend's states are.
#[cfg(feature = "redis")]
#[derive(Debug, Clone)]
pub enum RedisTarget {
    /// One server.
    Server(redis::Client),
    /// The primary the sentinels name at each connect.
    Sentinel(Sentinel),
}

#[cfg(feature = "redis")]
impl RedisTarget {
    /// A connection that finds the server (or the current primary) again after a failure.
    fn connect(&self) -> Reconnecting {
        match self {
            Self::Server(client) => Reconnecting::new(client.clone()),
            Self::Sentinel(sentinel) => Reconnecting::sentinel(sentinel.clone()),
        }
    }
}

/// `--durability`: when sled writes a decision to disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SledDurability {
    /// Flush before each state-changing decision returns (one fsync each).
    EveryDecision,
    /// Let sled flush every 500 ms; a crash forgets at most the last interval.
    Background,
}

impl Backend {
    /// The backend `text` names; `ca` (the `--redis-ca` file's name and bytes) is for a
    /// `rediss://` URL only. Errors are about the flags (exit code 2).
    pub fn new(text: &str, ca: Option<(&str, &[u8])>) -> Result<Self, String> {
        let tls = text.starts_with("rediss://") || text.starts_with("rediss+sentinel://");
        let redis = tls || text.starts_with("redis://") || text.starts_with("redis+sentinel://");
        if ca.is_some() && !tls {
            let what = if redis {
                "a redis:// URL, which has no TLS"
            } else {
                "not Redis"
            };
            return Err(format!(
                "--redis-ca is for a rediss:// backend (TLS); this --backend is {what}"
            ));
        }
        if text == "memory" {
            Ok(Self::Memory)
        } else if let Some(path) = text.strip_prefix("sled:").filter(|p| !p.is_empty()) {
            #[cfg(feature = "sled")]
            return Ok(Self::Sled(path.to_owned()));
            #[cfg(not(feature = "sled"))]
            return Err(format!(
                "--backend sled:{path}: this sluicegate is built without the `sled` feature"
            ));
        } else if redis {
            #[cfg(feature = "redis")]
            return Self::redis(text, ca);
            #[cfg(not(feature = "redis"))]
            return Err(format!(
                "--backend {text}: this sluicegate is built without the `redis` feature"
            ));
        } else if text.starts_with("etcd://") {
            #[cfg(feature = "etcd")]
            return sluicegate_etcd::endpoints(text)
                .map(Self::Etcd)
                .map_err(|e| e.to_string());
            #[cfg(not(feature = "etcd"))]
            return Err(format!(
                "--backend {text}: this sluicegate is built without the `etcd` feature"
            ));
        } else {
            Err(format!(
                "unknown backend {text:?}: use memory, sled:PATH, redis://HOST[:PORT], rediss://HOST[:PORT] (TLS), redis+sentinel://HOST:PORT[,HOST:PORT…]/MASTER or, for locks and leases, etcd://HOST:PORT[,HOST:PORT…]"
            ))
        }
    }

    /// A client for the Redis URL `text`, trusting the CA in `ca` if given.
    #[cfg(feature = "redis")]
    fn redis(text: &str, ca: Option<(&str, &[u8])>) -> Result<Self, String> {
        let (file, pem) = ca.unzip();
        if text.contains("+sentinel://") {
            let sentinel = Sentinel::parse(text).map_err(|e| format!("bad Sentinel URL: {e}"))?;
            let sentinel = match pem {
                Some(pem) => sentinel.with_ca(pem),
                None => sentinel,
            };
            return Ok(Self::Redis(Box::new(RedisTarget::Sentinel(sentinel))));
        }
        sluicegate_redis::client(text, pem)
            .map(|client| Self::Redis(Box::new(RedisTarget::Server(client))))
            .map_err(|e| match (e, file) {
                (e @ sluicegate_redis::Error::Tls(_), Some(file)) => {
                    format!("--redis-ca {file}: {e}")
                }
                (e, _) => format!("bad Redis URL {text:?}: {e}"),
            })
    }

    /// How `simulate` names it: the URL without its password or database.
    pub fn describe(&self) -> String {
        match self {
            Self::Memory => "memory".to_owned(),
            #[cfg(feature = "sled")]
            Self::Sled(path) => format!("sled:{path}"),
            #[cfg(feature = "redis")]
            Self::Redis(target) => match &**target {
                RedisTarget::Server(client) => {
                    let addr = client.get_connection_info().addr();
                    let scheme = match addr {
                        redis::ConnectionAddr::TcpTls { .. } => "rediss",
                        _ => "redis",
                    };
                    format!("{scheme}://{addr}")
                }
                RedisTarget::Sentinel(sentinel) => sentinel.to_string(),
            },
            #[cfg(feature = "etcd")]
            Self::Etcd(endpoints) => {
                let hosts: Vec<_> = endpoints
                    .iter()
                    .map(|e| e.trim_start_matches("http://"))
                    .collect();
                format!("etcd://{}", hosts.join(","))
            }
        }
    }
}

/// A `--backend` value clap accepts: one [`Backend::new`] takes (a bad URL is a flag
/// error); the client is made once `--redis-ca` is known.
pub fn backend_flag(text: &str) -> Result<String, String> {
    Backend::new(text, None).map(|_| text.to_owned())
}

/// A rate policy's states in one backend, for the commands: the core's [`Limiter`] with
/// the CLI's failures, and what only a stored backend has (see [`RateHost`]).
pub trait RateBackend {
    fn decide(&self, request: &Request<'_>) -> Result<Decision, Failure>;
    fn peek(&self, request: &Request<'_>) -> Result<Decision, Failure>;
    fn reset(&self, key: &str) -> Result<(), Failure>;
    /// Deletes every state of this algorithm in the namespace; returns how many.
    fn purge(&self) -> Result<u64, Failure>;
    /// The stored state, decoded, for `inspect`.
    fn state(&self, key: &str) -> Result<Option<AnyState>, Failure>;
    /// A cost reported after the work (`replay`'s report and refund rows).
    fn report(&self, request: &ReportRequest<'_>) -> Result<Reported, Failure>;
    /// After a run: a warning if the backend had to forget states that were not fresh.
    fn warning(&self) -> Option<String>;
}

#[cfg(any(feature = "sled", feature = "redis", feature = "etcd"))]
/// One lease table per key in one backend, for the commands: the core's [`LeaseHost`]
/// with the CLI's failures, and the backend's clock. A request without its own time is
/// on the backend's clock (Redis: the server's).
pub trait LeaseBackend {
    fn acquire(&self, request: &LeaseRequest<'_>) -> Result<Acquired, Failure>;
    /// An acquire that may wait up to `wait` µs for a lease to free, where the backend
    /// can say when one does (etcd's watch); elsewhere one attempt, the command polling.
    fn acquire_within(
        &self,
        request: &LeaseRequest<'_>,
        _wait: Ticks,
    ) -> Result<Acquired, Failure> {
        self.acquire(request)
    }
    fn release(&self, request: &LeaseRequest<'_>) -> Result<Grant, Failure>;
    fn renew(&self, request: &LeaseRequest<'_>) -> Result<Grant, Failure>;
    /// The stored table, for `inspect`.
    fn state(&self, key: &str) -> Result<Option<LeaseState>, Failure>;
    /// The backend's clock, which `inspect` reads expiries against.
    fn now(&self) -> Result<Ticks, Failure>;
}

/// What a limiting host has beyond the core's contract, for the commands: the per-host
/// code is this and the host's construction.
trait RateHost: Limiter {
    fn purge(&self) -> Result<u64, Failure>;
    fn state(&self, key: &[u8]) -> Result<Option<AnyState>, Failure>;
    /// The contract's reset; the memory backend refuses, as nothing outlives a command.
    fn forget(&self, key: &[u8]) -> Result<(), Failure>
    where
        Failure: From<Self::Error>,
    {
        Ok(Limiter::reset(self, key)?)
    }
    fn warning(&self) -> Option<String> {
        None
    }
    /// The core's [`Reporter`].
    fn report(&self, request: &ReportRequest<'_>) -> Result<Reported, Failure>;
}

/// What a lease host has beyond the core's contract: its clock.
#[cfg(any(feature = "sled", feature = "redis", feature = "etcd"))]
trait Clocked: LeaseHost {
    /// sled has no clock of its own: this machine's.
    fn now(&self) -> Result<Ticks, Failure> {
        Ok(MonotonicClock::new().now())
    }
}

/// A host for the length of one command, and what it keeps open meanwhile.
struct Hosted<H> {
    host: H,
    _keep: Keep,
}

/// What a host keeps open while a command runs: sled's database, flushed when the
/// command ends, whatever the durability.
#[derive(Default)]
struct Keep(#[cfg(feature = "sled")] Option<sled::Db>);

#[cfg(feature = "sled")]
impl Drop for Keep {
    fn drop(&mut self) {
        if let Some(db) = &self.0 {
            let _ = db.flush();
        }
    }
}

impl<H: RateHost> RateBackend for Hosted<H>
where
    Failure: From<H::Error>,
{
    fn decide(&self, request: &Request<'_>) -> Result<Decision, Failure> {
        Ok(Limiter::check(&self.host, request)?)
    }

    fn peek(&self, request: &Request<'_>) -> Result<Decision, Failure> {
        Ok(Limiter::peek(&self.host, request)?)
    }

    fn reset(&self, key: &str) -> Result<(), Failure> {
        self.host.forget(key.as_bytes())
    }

    fn purge(&self) -> Result<u64, Failure> {
        RateHost::purge(&self.host)
    }

    fn state(&self, key: &str) -> Result<Option<AnyState>, Failure> {
        RateHost::state(&self.host, key.as_bytes())
    }

    fn report(&self, request: &ReportRequest<'_>) -> Result<Reported, Failure> {
        RateHost::report(&self.host, request)
    }

    fn warning(&self) -> Option<String> {
        self.host.warning()
    }
}

#[cfg(any(feature = "sled", feature = "redis", feature = "etcd"))]
impl<H: Clocked> LeaseBackend for Hosted<H>
where
    Failure: From<H::Error>,
{
    fn acquire(&self, request: &LeaseRequest<'_>) -> Result<Acquired, Failure> {
        Ok(LeaseHost::acquire(&self.host, request)?)
    }

    fn release(&self, request: &LeaseRequest<'_>) -> Result<Grant, Failure> {
        Ok(LeaseHost::release(&self.host, request)?)
    }

    fn renew(&self, request: &LeaseRequest<'_>) -> Result<Grant, Failure> {
        Ok(LeaseHost::renew(&self.host, request)?)
    }

    fn state(&self, key: &str) -> Result<Option<LeaseState>, Failure> {
        Ok(LeaseHost::state(&self.host, key.as_bytes())?)
    }

    fn now(&self) -> Result<Ticks, Failure> {
        self.host.now()
    }
}

/// How a command opens its backend.
// Creating, durability and waiting are sled's.
#[cfg_attr(not(feature = "sled"), allow(dead_code))]
#[derive(Debug, Clone)]
pub struct Open {
    /// Where the states live, with `--redis-ca` applied.
    pub backend: Backend,
    /// Every stored key is `namespace + key`.
    pub namespace: String,
    /// Whether the command records decisions: only then may a sled database be created
    /// (reading or deleting needs none).
    pub creates: bool,
    pub durability: SledDurability,
    /// The memory backend's most keys held at once.
    pub max_keys: usize,
    /// How long to keep trying a sled database in use by another process (zero: fail at
    /// once). Lease commands hold it for milliseconds, so they wait for each other.
    pub in_use_wait: std::time::Duration,
}

/// The message for memory state, which no other command can see.
pub const MEMORY_FORGETS: &str = "the memory backend keeps states only while one command runs, so there is nothing stored to inspect, reset or purge; use --backend sled:PATH or redis://HOST";

impl Open {
    /// The states of `algorithm` in this backend.
    pub fn rates(&self, algorithm: AnyAlgorithm) -> Result<Box<dyn RateBackend>, Failure> {
        let how = self;
        Ok(match &self.backend {
            // Every request carries its time; the clock is never read.
            Backend::Memory => Box::new(Hosted {
                // A replay forgets rather than refuses when full, and says so (`warning`):
                // refusing new keys would turn the trace's admissions into denials.
                host: KeyedLimiter::with_clock(algorithm, how.max_keys, ManualClock::new(0))
                    .on_full(OnFull::Evict),
                _keep: Keep::default(),
            }),
            #[cfg(feature = "sled")]
            Backend::Sled(path) => {
                let (db, tree, durability) = open_tree(path, how)?;
                Box::new(Hosted {
                    host: SledLimiter::new(tree, algorithm, durability)
                        .with_prefix(how.namespace.as_bytes()),
                    _keep: Keep(Some(db)),
                })
            }
            #[cfg(feature = "redis")]
            Backend::Redis(target) => {
                let limiter = RedisLimiter::new(algorithm)
                    .map_err(|e| Failure::Input(format!("this policy cannot run on Redis: {e}")))?
                    .with_prefix(how.namespace.as_bytes());
                Box::new(Hosted {
                    host: Connected::new(limiter, target.connect()),
                    _keep: Keep::default(),
                })
            }
            #[cfg(feature = "etcd")]
            Backend::Etcd(_) => return Err(Failure::Input(ETCD_LEASES_ONLY.into())),
        })
    }

    /// The lease tables of `model` in this backend.
    #[cfg(any(feature = "sled", feature = "redis", feature = "etcd"))]
    pub fn leases(&self, model: Concurrency) -> Result<Box<dyn LeaseBackend>, Failure> {
        match &self.backend {
            Backend::Memory => Err(Failure::Input(
                "the memory backend forgets leases when the command ends, so the next command would find every lease free; use --backend sled:PATH or redis://HOST".into(),
            )),
            #[cfg(feature = "sled")]
            Backend::Sled(path) => {
                let (db, tree, durability) = open_tree(path, self)?;
                Ok(Box::new(Hosted {
                    host: SledLeases::new(tree, model, durability)
                        .with_prefix(self.namespace.as_bytes()),
                    _keep: Keep(Some(db)),
                }))
            }
            #[cfg(feature = "redis")]
            Backend::Redis(target) => Ok(Box::new(Hosted {
                host: Connected::new(
                    RedisLeases::new(model).with_prefix(self.namespace.as_bytes()),
                    target.connect(),
                ),
                _keep: Keep::default(),
            })),
            #[cfg(feature = "etcd")]
            Backend::Etcd(endpoints) => {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| Failure::Backend(format!("cannot start a runtime: {e}")))?;
                let leases = runtime.block_on(EtcdLeases::connect(endpoints, model))?;
                Ok(Box::new(EtcdLeaseBackend {
                    leases: leases.with_prefix(self.namespace.as_bytes()),
                    runtime,
                }))
            }
        }
    }
}

#[cfg(feature = "redis")]
use sluicegate_core::rwlock::LockError;

#[cfg(feature = "redis")]
impl Open {
    /// The lock family and a connection to it, on Redis only (the one backend that holds
    /// it); the connection's requests may block `blocking` beyond the usual timeout (a
    /// waiter's `BLPOP`).
    pub fn rw_lock(
        &self,
        lease: sluicegate_core::rwlock::RwLease,
        place_ttl: Ticks,
        blocking: std::time::Duration,
    ) -> Option<(sluicegate_redis::RedisRwLock, Reconnecting)> {
        let Backend::Redis(target) = &self.backend else {
            return None;
        };
        let lock = sluicegate_redis::RedisRwLock::new(lease)
            .with_prefix(self.namespace.as_bytes())
            .with_place_ttl(place_ttl)
            .ok()?;
        let timeout = sluicegate_redis::DEFAULT_TIMEOUT + blocking;
        Some((lock, target.connect().with_timeout(timeout)))
    }
}

/// The message for rate policies on etcd, which holds locks and leases only.
#[cfg(feature = "etcd")]
const ETCD_LEASES_ONLY: &str = "etcd holds locks and leases only (lock, lease); rate limits need memory, sled:PATH or redis://HOST";

/// Leases on etcd, whose client is asynchronous: each call runs on a runtime of the
/// command's own.
#[cfg(feature = "etcd")]
struct EtcdLeaseBackend {
    leases: EtcdLeases,
    runtime: tokio::runtime::Runtime,
}

#[cfg(feature = "etcd")]
impl LeaseBackend for EtcdLeaseBackend {
    fn acquire(&self, request: &LeaseRequest<'_>) -> Result<Acquired, Failure> {
        Ok(self.runtime.block_on(self.leases.acquire(request))?)
    }

    /// Woken by etcd's watch when a lease is released or expires, not by polling.
    fn acquire_within(&self, request: &LeaseRequest<'_>, wait: Ticks) -> Result<Acquired, Failure> {
        let wait = std::time::Duration::from_micros(wait);
        Ok(self
            .runtime
            .block_on(self.leases.acquire_waiting(request, wait))?)
    }

    fn release(&self, request: &LeaseRequest<'_>) -> Result<Grant, Failure> {
        Ok(self.runtime.block_on(self.leases.release(request))?)
    }

    fn renew(&self, request: &LeaseRequest<'_>) -> Result<Grant, Failure> {
        Ok(self.runtime.block_on(self.leases.renew(request))?)
    }

    fn state(&self, key: &str) -> Result<Option<LeaseState>, Failure> {
        Ok(self.runtime.block_on(self.leases.state(key.as_bytes()))?)
    }

    /// Expiries are this machine's clock plus the time etcd says a lease has left.
    fn now(&self) -> Result<Ticks, Failure> {
        Ok(MonotonicClock::new().now())
    }
}

/// etcd's errors: a lease refused as on every backend, a request's own time or a bad URL
/// is bad input, anything else the backend's failure.
#[cfg(feature = "etcd")]
impl From<sluicegate_etcd::Error> for Failure {
    fn from(e: sluicegate_etcd::Error) -> Self {
        match e {
            sluicegate_etcd::Error::Lease(e) => lease_failure(e),
            e @ (sluicegate_etcd::Error::ExplicitTime | sluicegate_etcd::Error::Url { .. }) => {
                Self::Input(e.to_string())
            }
            e => Self::Backend(e.to_string()),
        }
    }
}

/// The database at `path`, the command line's tree in it, and the durability asked for.
#[cfg(feature = "sled")]
fn open_tree(path: &str, how: &Open) -> Result<(sled::Db, sled::Tree, Durability), Failure> {
    let deadline = Instant::now() + how.in_use_wait;
    let db = loop {
        match open_sled(path, how.creates) {
            Err(Failure::InUse(_)) if Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            result => break result?,
        }
    };
    let tree = db
        .open_tree("sluicegate")
        .map_err(|e| Failure::Backend(format!("sled at {path}: {e}")))?;
    let durability = match how.durability {
        SledDurability::EveryDecision => Durability::EveryDecision,
        SledDurability::Background => Durability::Background,
    };
    Ok((db, tree, durability))
}

/// Opens the sled database at `path`: an existing one always, a new one only for a
/// command that records decisions and only inside an existing directory, so a mistyped
/// path is an error instead of a new empty database.
#[cfg(feature = "sled")]
pub fn open_sled(path: &str, creates: bool) -> Result<sled::Db, Failure> {
    let create = if creates {
        Create::InExistingDir
    } else {
        Create::Never
    };
    sluicegate_sled::open(Path::new(path), create).map_err(|e| match e {
        sluicegate_sled::Error::NotFound { .. } => Failure::Input(format!(
            "no database at {path} (commands that only read or delete never create one)"
        )),
        sluicegate_sled::Error::NoParentDir { parent, .. } => Failure::Input(format!(
            "no database at {path}, and no directory {} to create it in",
            parent.display()
        )),
        sluicegate_sled::Error::InUse { .. } => Failure::InUse(format!(
            "the sled database at {path} is in use by another process; sled allows one process at a time"
        )),
        e => Failure::Backend(format!("sled at {path}: {e}")),
    })
}

/// The memory backend: a keyed limiter deciding each request at its own time (the
/// clock is never read), whose states end with the command.
impl RateHost for KeyedLimiter<Vec<u8>, AnyAlgorithm, ManualClock> {
    fn purge(&self) -> Result<u64, Failure> {
        Err(Failure::Input(MEMORY_FORGETS.into()))
    }

    fn state(&self, _key: &[u8]) -> Result<Option<AnyState>, Failure> {
        Err(Failure::Input(MEMORY_FORGETS.into()))
    }

    fn forget(&self, _key: &[u8]) -> Result<(), Failure> {
        Err(Failure::Input(MEMORY_FORGETS.into()))
    }

    fn report(&self, request: &ReportRequest<'_>) -> Result<Reported, Failure> {
        Ok(Reporter::report(self, request)?)
    }

    fn warning(&self) -> Option<String> {
        let evicted = self.evicted();
        (evicted > 0).then(|| {
            format!(
                "warning: more keys were limited at once than --max-keys holds; {evicted} keys were forgotten before their state was fresh (any that came back were decided as new) (raise --max-keys, or use --backend sled:PATH)"
            )
        })
    }
}

/// A time beyond the core's range.
impl From<ParamError> for Failure {
    fn from(e: ParamError) -> Self {
        Self::Input(e.to_string())
    }
}

#[cfg(feature = "sled")]
impl RateHost for SledLimiter<AnyAlgorithm> {
    fn purge(&self) -> Result<u64, Failure> {
        let purged = SledLimiter::purge(self)?;
        Ok(u64::try_from(purged).unwrap_or(u64::MAX))
    }

    fn state(&self, key: &[u8]) -> Result<Option<AnyState>, Failure> {
        Ok(SledLimiter::state(self, key)?)
    }

    fn report(&self, request: &ReportRequest<'_>) -> Result<Reported, Failure> {
        Ok(Reporter::report(self, request)?)
    }
}

#[cfg(feature = "sled")]
impl Clocked for SledLeases {}

/// sled's errors: their messages are the library's (a record sluicegate cannot read is
/// worded by the core's decoder, its key shown by `KeyDisplay`, as on Redis).
#[cfg(feature = "sled")]
impl From<sluicegate_sled::Error> for Failure {
    fn from(e: sluicegate_sled::Error) -> Self {
        match e {
            sluicegate_sled::Error::Lease(e) => lease_failure(e),
            e @ sluicegate_sled::Error::Time(_) => Self::Input(e.to_string()),
            e => Self::Backend(e.to_string()),
        }
    }
}

#[cfg(feature = "redis")]
impl RateHost for Connected<RedisLimiter<AnyAlgorithm>> {
    fn purge(&self) -> Result<u64, Failure> {
        Ok(self.host().purge(&mut *self.connection())?)
    }

    fn state(&self, key: &[u8]) -> Result<Option<AnyState>, Failure> {
        Ok(self.host().state(&mut *self.connection(), key)?)
    }

    fn report(&self, request: &ReportRequest<'_>) -> Result<Reported, Failure> {
        Ok(Reporter::report(self, request)?)
    }
}

#[cfg(feature = "redis")]
impl Clocked for Connected<RedisLeases> {
    /// The server's `TIME`, the clock its leases expire on.
    fn now(&self) -> Result<Ticks, Failure> {
        let (seconds, micros): (u64, u64) = redis::cmd("TIME")
            .query(&mut *self.connection())
            .map_err(sluicegate_redis::Error::Redis)?;
        Ok(seconds.saturating_mul(1_000_000).saturating_add(micros))
    }
}

/// A lease call refused: not held by that owner is exit 1 (a shell script's "no"),
/// a bad owner or ttl is bad input. The caller names the key and owner.
#[cfg(any(feature = "sled", feature = "redis", feature = "etcd"))]
fn lease_failure(e: LeaseError) -> Failure {
    match e {
        LeaseError::NotHeld => Failure::NotHeld,
        e => Failure::Input(e.to_string()),
    }
}

#[cfg(feature = "redis")]
impl From<sluicegate_redis::Error> for Failure {
    fn from(e: sluicegate_redis::Error) -> Self {
        match e {
            sluicegate_redis::Error::Lease(e) => lease_failure(e),
            sluicegate_redis::Error::Lock(LockError::NotHeld) => Self::NotHeld,
            e @ sluicegate_redis::Error::Lock(_) => Self::Input(e.to_string()),
            e @ sluicegate_redis::Error::OutOfRange { .. } => Self::Input(e.to_string()),
            e @ sluicegate_redis::Error::Tls(_) => Self::Tls(e.to_string()),
            e => Self::Backend(e.to_string()),
        }
    }
}
