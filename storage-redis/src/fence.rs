//! A resource that refuses writes carrying a stale fencing token.

use std::borrow::Cow;
use std::sync::LazyLock;

use redis::{ConnectionLike, Script};

use crate::error::Error;
use crate::lua::MAX_LUA_TICKS;
use crate::redlock::RedlockGrant;

static FENCE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../lua/fence.lua")));

/// A value in Redis guarded by fencing tokens (Kleppmann's answer to leases that expire
/// under a paused holder): each write carries the writer's token (from
/// [`RedisLeases`](crate::RedisLeases)), and a write whose token is below the highest the
/// resource has seen is refused ([`Error::Stale`]), atomically, by one script. A holder
/// paused past its ttl while another acquired cannot overwrite the newer holder's work.
///
/// The key is a Redis hash with the field `value` and the highest token seen from each
/// source (`token` for a lock on one server, `token.I` for server `I` of a Redlock). The same check belongs in
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
        self.write_fenced(con, &[(Cow::Borrowed("token"), token)], value)
    }

    /// Stores `value` written under a [`Redlock`](crate::Redlock): refused
    /// ([`Error::Stale`], nothing changes) if any granting server's token is below the
    /// highest seen from that server. Two majorities share a server, whose token grew
    /// from the earlier grant to the later one, so a holder whose lock expired is refused
    /// once a later holder wrote, whatever the clocks did.
    pub fn write_redlock<C: ConnectionLike>(
        &self,
        con: &mut C,
        grant: &RedlockGrant,
        value: &[u8],
    ) -> Result<(), Error> {
        let tokens: Vec<_> = (grant.tokens.iter().enumerate())
            .filter_map(|(server, token)| Some((Cow::Owned(format!("token.{server}")), (*token)?)))
            .collect();
        self.write_fenced(con, &tokens, value)
    }

    /// Stores `value` if no token of `tokens` (each a source's field and the writer's
    /// token from it) is below the highest seen from its source.
    fn write_fenced<C: ConnectionLike>(
        &self,
        con: &mut C,
        tokens: &[(Cow<'_, str>, u64)],
        value: &[u8],
    ) -> Result<(), Error> {
        let mut call = FENCE.key(&self.key);
        call.arg(value);
        for (source, token) in tokens {
            if *token > MAX_LUA_TICKS * 2 {
                return Err(Error::OutOfRange {
                    what: "token",
                    value: *token,
                    max: MAX_LUA_TICKS * 2,
                    reason: crate::error::INEXACT,
                });
            }
            call.arg(source.as_ref()).arg(*token);
        }
        let reply: Vec<u64> = call
            .invoke(con)
            .map_err(|e| Error::from_redis(e, &self.key))?;
        match reply[..] {
            [1] => Ok(()),
            [0, token, highest] => Err(Error::Stale { token, highest }),
            _ => Err(Error::Reply),
        }
    }

    /// The highest token [`write`](Self::write) has seen (0 if only Redlock grants wrote)
    /// and the value last written; `None` before any write.
    pub fn read<C: ConnectionLike>(&self, con: &mut C) -> Result<Option<(u64, Vec<u8>)>, Error> {
        let (token, value): (Option<u64>, Option<Vec<u8>>) = redis::cmd("HMGET")
            .arg(&self.key)
            .arg("token")
            .arg("value")
            .query(con)
            .map_err(|e| Error::from_redis(e, &self.key))?;
        Ok(value.map(|value| (token.unwrap_or(0), value)))
    }
}
