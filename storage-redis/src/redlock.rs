//! Redlock: one lock over several independent Redis servers, held while a majority of
//! them grants it.

use std::time::Instant;

use redis::ConnectionLike;
use sluicegate_core::{Concurrency, LeaseError, LeaseRequest, Ticks, MILLISECOND};

use crate::error::Error;
use crate::lease::RedisLeases;

/// A lock over `N` independent Redis servers (no replication between them), after
/// antirez's Redlock: acquire on every server with the same owner and ttl, and hold the
/// lock when a majority granted it with time to spare. It survives a minority of
/// servers failing, where a lock on one server (with a replica that may lag behind a
/// failover) does not.
///
/// Each server keeps the lock as a [`RedisLeases`] table of `max` 1, so every server's
/// grant carries that server's fencing token. Redlock's safety rests on timing (the ttl
/// must outlast the holder's pauses and the servers' clocks must run at about the same
/// rate); the tokens are the answer when that fails (Kleppmann): a resource that checks
/// them ([`FencedResource::write_redlock`](crate::FencedResource::write_redlock)) refuses
/// a stale holder without any timing assumption, because two majorities share a server,
/// and that server's token grew between the two grants.
#[derive(Debug, Clone)]
pub struct Redlock {
    leases: RedisLeases,
}

/// A Redlock held on a majority of the servers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedlockGrant {
    /// How long the lock is safe to act on, counted from the start of the call that
    /// acquired (or renewed) it: the ttl less the time the call took and the clock
    /// drift allowance (ttl / 100 + 2 ms, as Redlock's description puts it).
    pub validity: Ticks,
    /// One entry per server, in the order the servers were given: that server's fencing
    /// token where it granted the lock, `None` where it did not (held elsewhere, or
    /// unreachable).
    pub tokens: Vec<Option<u64>>,
}

impl Redlock {
    /// A lock whose keys (on every server) start with `prefix`.
    pub fn new(prefix: impl Into<Vec<u8>>) -> Self {
        Self {
            leases: RedisLeases::new(Concurrency::lock()).with_prefix(prefix),
        }
    }

    /// The per-server lock (to read a server's table, or pick a [`Route`](crate::Route)).
    pub fn leases(&self) -> &RedisLeases {
        &self.leases
    }

    /// Acquires the request's key for its owner for its ttl on every server of `servers` (one
    /// connection per independent server; give each a timeout well below `ttl`).
    ///
    /// `Ok(Some(grant))` when a majority granted it and time is left
    /// (`grant.validity > 0`); `Ok(None)` when not (another owner holds it, or the
    /// servers split between contenders, or the calls took the whole ttl): every grant
    /// this call made is then released, and the caller may retry after a random delay.
    /// An error when fewer than a majority answered at all (the last error seen), after
    /// releasing what was granted. Re-acquiring as the same owner re-enters the lock.
    pub fn acquire<C: ConnectionLike>(
        &self,
        servers: &mut [C],
        request: &LeaseRequest<'_>,
    ) -> Result<Option<RedlockGrant>, Error> {
        let tally = tally(servers, request.ttl, |con| {
            let acquired = self.leases.acquire(con, request)?;
            Ok(acquired.grant.map(|grant| grant.token))
        })?;
        let tally = match tally.held() {
            Ok(grant) => return Ok(Some(grant)),
            Err(tally) => tally,
        };
        self.undo(servers, &tally.tokens, request);
        match tally.last_error {
            Some(e) if tally.answered < majority(servers.len()) => Err(e),
            _ => Ok(None),
        }
    }

    /// Extends the owner's lock to the request's ttl from now on every server that still holds it;
    /// `Ok(Some(grant))` if a majority still did, with a fresh validity (the tokens stay).
    /// `Ok(None)` when the lock is lost: its holder must stop acting on it.
    pub fn renew<C: ConnectionLike>(
        &self,
        servers: &mut [C],
        request: &LeaseRequest<'_>,
    ) -> Result<Option<RedlockGrant>, Error> {
        let renewed = |con: &mut C| Ok(Some(self.leases.renew(con, request)?.token));
        Ok(tally(servers, request.ttl, renewed)?.held().ok())
    }

    /// Releases the owner's hold on the request's key on every server (also where its grant seemed to
    /// fail: the reply may have been lost after the server granted it). Returns how many
    /// servers released a hold; an error only when no server answered.
    pub fn release<C: ConnectionLike>(
        &self,
        servers: &mut [C],
        request: &LeaseRequest<'_>,
    ) -> Result<usize, Error> {
        let (mut released, mut answered, mut last_error) = (0, 0, None);
        for con in servers.iter_mut() {
            match self.leases.release(con, request) {
                Ok(_) => (released, answered) = (released + 1, answered + 1),
                Err(Error::Lease(LeaseError::NotHeld)) => answered += 1,
                Err(e) => last_error = Some(e),
            }
        }
        match last_error {
            Some(e) if answered == 0 => Err(e),
            _ => Ok(released),
        }
    }

    /// Gives back the grants of a failed acquire; errors are ignored. A server that did
    /// not answer may have granted all the same: that grant expires at its ttl (releasing
    /// there blindly could take back a hold the owner had before this call).
    fn undo<C: ConnectionLike>(
        &self,
        servers: &mut [C],
        tokens: &[Option<u64>],
        request: &LeaseRequest<'_>,
    ) {
        for (con, token) in servers.iter_mut().zip(tokens) {
            if token.is_some() {
                let _ = self.leases.release(con, request);
            }
        }
    }
}

/// What the servers answered to one call each.
struct Tally {
    /// Each server's token, `None` where it granted none or failed.
    tokens: Vec<Option<u64>>,
    /// How many servers answered.
    answered: usize,
    /// The last failure of a server that did not answer.
    last_error: Option<Error>,
    /// The ttl less the time the calls took and the drift allowance.
    validity: Ticks,
}

impl Tally {
    /// The lock, if a majority of the servers gave a token and time is left; else the
    /// tally.
    fn held(self) -> Result<RedlockGrant, Self> {
        let granted = self.tokens.iter().flatten().count();
        if granted >= majority(self.tokens.len()) && self.validity > 0 {
            Ok(RedlockGrant {
                validity: self.validity,
                tokens: self.tokens,
            })
        } else {
            Err(self)
        }
    }
}

/// Runs `call` on every server of `servers`, then counts the answers and the validity
/// left of `ttl`; the caller's error (see [`callers_error`]) instead, as every server
/// answers the same.
fn tally<C>(
    servers: &mut [C],
    ttl: Ticks,
    call: impl FnMut(&mut C) -> Result<Option<u64>, Error>,
) -> Result<Tally, Error> {
    let start = Instant::now();
    let replies: Vec<_> = servers.iter_mut().map(call).collect();
    let mut tally = Tally {
        tokens: Vec::with_capacity(replies.len()),
        answered: 0,
        last_error: None,
        validity: validity(ttl, start),
    };
    for reply in replies {
        match reply {
            Ok(token) => {
                tally.answered += 1;
                tally.tokens.push(token);
            }
            Err(e) if callers_error(&e) => return Err(e),
            Err(e) => {
                tally.last_error = Some(e);
                tally.tokens.push(None);
            }
        }
    }
    Ok(tally)
}

/// A bad owner or ttl: the caller's error, the same on every server, so no server's
/// answer can change it (a lease not held, or a server down, is that server's answer).
fn callers_error(e: &Error) -> bool {
    match e {
        Error::OutOfRange { .. } => true,
        Error::Lease(e) => !matches!(e, LeaseError::NotHeld),
        _ => false,
    }
}

/// The smallest majority of `n` servers.
fn majority(n: usize) -> usize {
    n / 2 + 1
}

/// `ttl` less the time since `start` and the drift allowance, or 0.
fn validity(ttl: Ticks, start: Instant) -> Ticks {
    let elapsed = sluicegate_core::ticks(start.elapsed());
    let drift = ttl / 100 + 2 * MILLISECOND;
    ttl.saturating_sub(elapsed).saturating_sub(drift)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_majority_is_more_than_half() {
        assert_eq!(
            [1, 2, 3, 4, 5].map(majority),
            [1, 2, 2, 3, 3],
            "servers 1..=5"
        );
    }

    #[test]
    fn validity_leaves_the_drift_allowance() {
        let start = Instant::now();
        let v = validity(10_000 * MILLISECOND, start);
        assert!(v <= 10_000 * MILLISECOND - 100 * MILLISECOND - 2 * MILLISECOND);
        assert!(v > 9_000 * MILLISECOND);
        assert_eq!(validity(MILLISECOND, start), 0, "a ttl below the allowance");
    }
}
