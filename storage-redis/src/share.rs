//! Quota shares across replicas (Envoy's quota protocol): one limit's subscribers, from
//! every replica, in one Redis hash, settled by one script that computes the core's
//! [`share::Ledger`](sluicegate_core::share::Ledger) targets and
//! [`share::grant`](sluicegate_core::share::grant) in Lua.

use std::sync::LazyLock;
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::Script;
use sluicegate_core::share::Ledger;

use crate::error::{Error, INEXACT};
use crate::lua::LIB;

static SHARE: LazyLock<Script> =
    LazyLock::new(|| Script::new(&format!("{LIB}{}", include_str!("../lua/share.lua"))));

/// The largest limit shared: a hash's sums of thousands of subscribers' shares stay exact
/// in Lua's doubles.
pub const MAX_SHARED_LIMIT: u64 = 1 << 32;

/// One of the caller's subscribers: its field in the hash, its demand, and the share
/// its proxy holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Subscription<'a> {
    /// Unique across replicas (a replica's id, then its own name for the subscriber).
    pub field: &'a str,
    /// Units per period it asked for lately.
    pub demand: u64,
    /// The share its proxy holds now, if any.
    pub live: Option<u64>,
}

/// Limits shared in Redis by `ledger`, each subscriber forgotten `ttl` after its
/// replica last settled it (a dead replica's proxies' assignments have expired by then).
#[derive(Debug, Clone, Copy)]
pub struct RedisShares {
    ledger: Ledger,
    ttl: Duration,
}

impl RedisShares {
    /// Shares by `ledger`, subscribers kept `ttl` (at least a millisecond).
    pub fn new(ledger: Ledger, ttl: Duration) -> Self {
        Self {
            ledger,
            ttl: ttl.max(Duration::from_millis(1)),
        }
    }

    /// Settles the limit of `limit` units kept at `key`: `leaving` subscribers removed,
    /// `mine` upserted, every target re-computed, and `mine` granted theirs within room.
    /// Returns their live shares and targets in order (a live share under its target
    /// waits for room another replica's subscriber still holds). `now_ms`: an explicit time (tests), else the
    /// server's clock.
    pub async fn settle<C: ConnectionLike + Send>(
        &self,
        con: &mut C,
        key: &str,
        limit: u64,
        now_ms: Option<u64>,
        leaving: &[&str],
        mine: &[Subscription<'_>],
    ) -> Result<Vec<(u64, u64)>, Error> {
        if limit > MAX_SHARED_LIMIT {
            return Err(Error::OutOfRange {
                what: "shared limit",
                value: limit,
                max: MAX_SHARED_LIMIT,
                reason: INEXACT,
            });
        }
        let ttl_ms = u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX);
        let mut call = SHARE.key(key);
        match now_ms {
            Some(now) => call.arg(now),
            None => call.arg(""),
        };
        call.arg(ttl_ms)
            .arg(limit)
            .arg(self.ledger.floor_divisor)
            .arg(self.ledger.headroom_percent)
            .arg(self.ledger.hysteresis_percent)
            .arg(leaving.len())
            .arg(leaving);
        for s in mine {
            let live = s.live.map_or(-1, |l| i64::try_from(l).unwrap_or(i64::MAX));
            call.arg(s.field).arg(s.demand.min(limit)).arg(live);
        }
        call.invoke_async(con)
            .await
            .map_err(|e| Error::from_redis(e, key.as_bytes()))
    }
}
