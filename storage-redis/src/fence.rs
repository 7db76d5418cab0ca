//! A resource that refuses writes carrying a stale fencing token.

use std::sync::LazyLock;

use redis::{ConnectionLike, Script};

use crate::{Error, MAX_LUA_TICKS};

static FENCE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../lua/fence.lua")));

/// A value in Redis guarded by fencing tokens (Kleppmann's answer to leases that expire
/// under a paused holder): each write carries the writer's token (from
/// [`RedisLeases`](crate::RedisLeases)), and a write whose token is below the highest the
/// resource has seen is refused ([`Error::Stale`]), atomically, by one script. A holder
/// paused past its ttl while another acquired cannot overwrite the newer holder's work.
///
/// The key is a Redis hash with fields `token` and `value`. The same check belongs in
/// any store a lock protects (a database row's version column, say); this one serves
/// values kept in Redis, and the tests.
#[derive(Debug, Clone)]
pub struct FencedResource {
    key: Vec<u8>,
}

impl FencedResource {
    /// The resource kept at `key`.
    pub fn new(key: impl Into<Vec<u8>>) -> Self {
        Self { key: key.into() }
    }

    /// Stores `value` if `token` is at least the highest token seen, which becomes
    /// `token`; otherwise [`Error::Stale`] and nothing changes.
    pub fn write<C: ConnectionLike>(
        &self,
        con: &mut C,
        token: u64,
        value: &[u8],
    ) -> Result<(), Error> {
        if token > MAX_LUA_TICKS * 2 {
            return Err(Error::OutOfRange {
                what: "token",
                value: token,
                max: MAX_LUA_TICKS * 2,
            });
        }
        let (written, highest): (u8, u64) = FENCE
            .key(&self.key)
            .arg(token)
            .arg(value)
            .invoke(con)
            .map_err(|e| Error::from_redis(e, &self.key))?;
        if written == 1 {
            Ok(())
        } else {
            Err(Error::Stale { token, highest })
        }
    }

    /// The highest token seen and the value written with it; `None` before any write.
    pub fn read<C: ConnectionLike>(&self, con: &mut C) -> Result<Option<(u64, Vec<u8>)>, Error> {
        let (token, value): (Option<u64>, Option<Vec<u8>>) = redis::cmd("HMGET")
            .arg(&self.key)
            .arg("token")
            .arg("value")
            .query(con)
            .map_err(|e| Error::from_redis(e, &self.key))?;
        Ok(token.zip(value))
    }
}
