#![doc = include_str!("../README.md")]
#![deny(missing_docs)]
#![warn(unreachable_pub)]

mod any;
mod batch;
mod call;
mod client;
mod connected;
mod connection;
mod error;
mod fail;
mod fence;
pub mod fleet;
mod key;
mod lease;
mod limiter;
mod link;
mod lua;
mod redlock;
mod reply;
mod route;
mod rwlock;
mod seed;
mod sentinel;
mod share;
mod watchdog;

pub use client::client;
pub use connected::{Connected, ConnectedAsync};
pub use connection::{connect_async, Reconnecting, ReconnectingAsync, DEFAULT_TIMEOUT};
pub use error::Error;
pub use fail::{FailPolicy, Outcome};
pub use fence::FencedResource;
pub use lease::RedisLeases;
pub use limiter::{RedisLimiter, PURGE_BATCH};
pub use lua::{
    library_name, FastAsk, LuaAlgorithm, MAX_LUA_LIMIT, MAX_LUA_LOG_LIMIT, MAX_LUA_TICKS,
};
pub use redlock::{Redlock, RedlockGrant};
pub use reply::Taken;
pub use route::Route;
pub use rwlock::{Handed, HeldChange, RedisRwLock, CANCEL_POLL, DEFAULT_PLACE_TTL};
pub use sentinel::{Sentinel, SentinelUrlError, DEFAULT_SENTINEL_PORT};
pub use share::{RedisShares, Subscription, MAX_SHARED_LIMIT};
pub use watchdog::{AsyncLeaseGuard, LeaseGuard};
