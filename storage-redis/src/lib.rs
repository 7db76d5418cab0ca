//! Distributed rate limiting: tollgate's algorithms as Redis Lua.
//!
//! Each decision is one call: an `FCALL` into tollgate's function library on Redis ≥ 7
//! (loaded with `FUNCTION LOAD` the first time a server lacks it), else an `EVALSHA`
//! (the script sent with `EVAL` once a server answers `NOSCRIPT`) where `FUNCTION` is
//! refused or unknown; see [`Path`]. The Lua reads the key, decides with the core's
//! exact integer math, writes the core's canonical encoding back, and replies with the
//! decision. Time is the server's `TIME` (no client clock skew) unless the caller passes
//! `now`.
//!
//! Expiry: a state written at the server's time expires exactly when it is fresh again
//! (TTL = `reset_after`, rounded up to a millisecond), so idle keys vanish. A state
//! written at a request's own time (`Request::new(key).at(now)`: replays, tests) has no
//! expiry: the server cannot know how fast the caller's clock runs, and a TTL on its
//! own clock would forget state a slow replay still needs. Such keys stay until a
//! decision returns them to fresh (then they are deleted), [`RedisLimiter::reset`], or
//! [`RedisLimiter::purge`], which deletes every state of the limiter's algorithm under
//! its prefix.
//!
//! Keys holding anything else (a list, a string tollgate did not write) are refused by
//! every call with a typed error naming the key ([`Error::Foreign`], [`Error::Corrupt`],
//! the latter worded by the core's decoder, as in every host); nothing is admitted and
//! nothing changed.
//!
//! ```no_run
//! use tollgate_core::{TokenBucket, SECOND};
//! use tollgate_redis::{Reconnecting, RedisLimiter};
//!
//! let limiter = RedisLimiter::new(TokenBucket::new(10, 5, SECOND)?)?.with_prefix("rl:");
//! let mut con = Reconnecting::new(redis::Client::open("redis://127.0.0.1/")?);
//! let decision = limiter.check(&mut con, b"user:42", 1)?;
//! println!("allowed: {}, retry after {:?} µs", decision.allowed, decision.retry_after);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Keys: the prefix then the caller's key, binary-safe. A composite keeps each member in
//! `prefix{key}:i`, one hash tag, so Redis Cluster sends the decision to one node.
//!
//! The scripts' exact range is narrower than the core's: see [`LuaAlgorithm`].

mod any;
mod batch;
mod call;
mod connected;
mod connection;
mod error;
mod fail;
mod fence;
pub mod fleet;
mod lease;
mod limiter;
mod lua;
mod path;
mod redlock;
mod reply;
mod watchdog;

pub use connected::{Connected, ConnectedAsync};
pub use connection::{client, connect_async, Reconnecting, ReconnectingAsync, DEFAULT_TIMEOUT};
pub use error::Error;
pub use fail::{FailPolicy, Outcome};
pub use fence::FencedResource;
pub use lease::RedisLeases;
pub use limiter::{RedisLimiter, PURGE_BATCH};
pub use lua::{
    library_name, LuaAlgorithm, MAX_LUA_HORIZON, MAX_LUA_LIMIT, MAX_LUA_LOG_LIMIT, MAX_LUA_TICKS,
};
pub use path::Path;
pub use redlock::{Redlock, RedlockGrant};
pub use reply::Taken;
pub use watchdog::{AsyncLeaseGuard, LeaseGuard};
