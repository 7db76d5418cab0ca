use redis::RedisError;
use sluicegate_core::rwlock::LockError;
use sluicegate_core::{KeyDisplay, LeaseError};

/// What can go wrong deciding through Redis.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Redis could not be reached, or did not answer within the timeout.
    #[error("redis is unavailable: {0}")]
    Unavailable(#[source] RedisError),
    /// The server answered with something that is not Redis's protocol (an HTTP server,
    /// say): the address is wrong.
    #[error("not a Redis server: {0}")]
    NotRedis(String),
    /// Redis answered with an error.
    #[error("redis: {0}")]
    Redis(#[source] RedisError),
    /// The key holds bytes that are not a state of this algorithm (`reason` is the core
    /// decoder's, the same in every host), or a state outside the scripts' range.
    /// Nothing was admitted and the key is unchanged.
    #[error("key {} holds a state sluicegate cannot read: {reason}", KeyDisplay(.key))]
    Corrupt {
        /// The caller's key.
        key: Vec<u8>,
        /// What is wrong with it.
        reason: String,
    },
    /// The key holds a Redis value that is not a string (a list, a hash...): something
    /// other than sluicegate wrote it. Nothing was admitted and the key is unchanged.
    #[error("key {} holds a Redis {found}, not a sluicegate state", KeyDisplay(.key))]
    Foreign {
        /// The caller's key.
        key: Vec<u8>,
        /// The value's Redis type.
        found: String,
    },
    /// TLS could not be set up: the server's certificate is not signed by a trusted CA
    /// (the one given to the crate's `client` function, else the system's) or names
    /// another host, the server does not speak TLS, or the CA given is not a PEM
    /// certificate. Retrying does not help.
    #[error("TLS: {0}")]
    Tls(String),
    /// A parameter or input outside the range the scripts take: a time beyond the range
    /// they compute exactly, or a sliding log longer than they read on each decision.
    #[error("{what} is {value}, beyond {max}, {reason}")]
    OutOfRange {
        /// The parameter or input.
        what: &'static str,
        /// Its value.
        value: u64,
        /// The most allowed.
        max: u64,
        /// Why `max` is the most, and what to use beyond it.
        reason: &'static str,
    },
    /// A calendar window decided or reported at the server's time `now`, outside the
    /// period the caller gave: the period has turned (or the caller's clock is off);
    /// compute the period holding `now` and call again. Nothing was changed.
    #[error("the server's time {now} is outside the calendar period given")]
    OutOfPeriod {
        /// The server's time, in microseconds since the Unix epoch.
        now: u64,
    },
    /// A composite's members share a hash tag made of the key, so it cannot be empty.
    #[error("a composite limit needs a non-empty key")]
    EmptyKey,
    /// A lease call that cannot be carried out, nothing changed: the owner holds no
    /// unexpired lease ([`LeaseError::NotHeld`]: never acquired, released, or expired, so
    /// its holder must stop acting on it), or the owner or ttl is outside the core's range.
    #[error(transparent)]
    Lease(LeaseError),
    /// A lock call of [`RedisRwLock`](crate::RedisRwLock) that cannot be carried out,
    /// nothing changed: the owner holds no lease or has no place, the queue is full, or
    /// a parameter is outside the core's range.
    #[error(transparent)]
    Lock(LockError),
    /// A blocking acquire's [`WaitCancel`](sluicegate_core::memory::WaitCancel) was
    /// cancelled: the caller's place was given up, nothing is held.
    #[error("the wait was cancelled")]
    Cancelled,
    /// A [`FencedResource`](crate::FencedResource) refused a write: its token is below
    /// the highest it has seen, so the writer's lease expired and a later holder wrote.
    /// Nothing was written; the writer must stop.
    #[error("stale fencing token {token}: the resource has seen {highest}")]
    Stale {
        /// The writer's token.
        token: u64,
        /// The highest token the resource has seen.
        highest: u64,
    },
    /// A grant that too few replicas acknowledged in time
    /// ([`RedisLeases::with_replicas`](crate::RedisLeases::with_replicas)): it was given
    /// back, nothing is held.
    #[error("the grant reached {acknowledged} of the {wanted} replicas asked for in time; it was given back")]
    NotReplicated {
        /// Replicas that acknowledged it.
        acknowledged: u64,
        /// Replicas asked for.
        wanted: u32,
    },
    /// A lease call on no key at all.
    #[error("a lease call needs at least one key")]
    NoKeys,
    /// Something this client does not do yet (no call returns it today).
    #[error("not supported yet: {0}")]
    Unsupported(&'static str),
    /// A fleet setting that cannot work (a batch of zero, a batch above the limit...).
    #[error("fleet setting {setting}: {reason}")]
    FleetSetting {
        /// The setting.
        setting: &'static str,
        /// Why it is refused.
        reason: String,
    },
    /// A `redis+sentinel://` URL that cannot be used.
    #[error("bad Sentinel URL: {0}")]
    SentinelUrl(#[from] crate::SentinelUrlError),
    /// The script's reply had an unexpected shape.
    #[error("unexpected reply from the script")]
    Reply,
}

/// Why a time or token beyond the scripts' range is refused.
pub(crate) const INEXACT: &str = "the most the Redis scripts compute exactly";
/// Why a time beyond the core's is refused.
pub(crate) const LATEST: &str = "the latest time the core takes";

impl Error {
    /// Whether Redis could not be reached (what a [`FailPolicy`](crate::FailPolicy)
    /// applies to).
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Self::Unavailable(_))
    }

    /// Classifies an error from Redis about `key`.
    pub(crate) fn from_redis(error: RedisError, key: &[u8]) -> Self {
        if error.code() == Some("SLUICEGATE") {
            // Redis appends the script's location after the message.
            let detail = error.detail().unwrap_or_default();
            let detail = detail.split(" script:").next().unwrap_or(detail);
            if let Some(reason) = detail.strip_prefix("corrupt state: ") {
                return Self::Corrupt {
                    key: key.to_vec(),
                    reason: reason.to_owned(),
                };
            }
            if let Some(now) = detail.strip_prefix("out of period ") {
                if let Ok(now) = now.trim().parse() {
                    return Self::OutOfPeriod { now };
                }
            }
            if detail == "not held" {
                return Self::Lease(LeaseError::NotHeld);
            }
            // The module words a lease error as the core does.
            if let Some(reason) = detail.strip_prefix("lease: ") {
                let known = [
                    LeaseError::NotHeld,
                    LeaseError::TooManyHolds,
                    LeaseError::TokensExhausted,
                ];
                if let Some(e) = known.into_iter().find(|e| e.to_string() == reason) {
                    return Self::Lease(e);
                }
            }
            // The lock script words its errors as the core does.
            if let Some(reason) = detail.strip_prefix("lock: ") {
                let known = [
                    LockError::NotHeld,
                    LockError::NotQueued,
                    LockError::QueueFull,
                    LockError::TooManyHolds,
                ];
                if let Some(e) = known.into_iter().find(|e| e.to_string() == reason) {
                    return Self::Lock(e);
                }
            }
            if let Some(found) = detail.strip_prefix("foreign ") {
                return Self::Foreign {
                    key: key.to_vec(),
                    found: found.to_owned(),
                };
            }
        }
        if let Some(reason) = tls_failure(&error) {
            return Self::Tls(reason);
        }
        if error.kind() == redis::ErrorKind::Parse {
            let detail = error
                .detail()
                .unwrap_or("its reply is not Redis's protocol");
            return Self::NotRedis(detail.to_owned());
        }
        if error.is_io_error()
            || error.is_timeout()
            || error.is_connection_dropped()
            || error.is_connection_refusal()
            || error.kind() == redis::ErrorKind::ClusterConnectionNotFound
            // The server was the primary and is a replica now: a failover is under way.
            || error.code() == Some("READONLY")
        {
            Self::Unavailable(error)
        } else {
            Self::Redis(error)
        }
    }
}

/// The TLS failure behind `error`, if it is one: rustls reports a refused certificate or
/// a failed handshake as an I/O error wrapping a `rustls::Error`, which redis keeps in an
/// `Arc`. Neither `Arc` nor `io::Error` returns what it wraps as its `source`, so each
/// is opened here.
fn tls_failure(error: &RedisError) -> Option<String> {
    type Shared = std::sync::Arc<dyn std::error::Error + Send + Sync>;
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(mut e) = source {
        source = e.source();
        if let Some(shared) = e.downcast_ref::<Shared>() {
            e = &**shared;
        }
        if let Some(inner) = e
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
        {
            e = inner;
        }
        if let Some(tls) = e.downcast_ref::<rustls::Error>() {
            return Some(tls.to_string());
        }
    }
    None
}
