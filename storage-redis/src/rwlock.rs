//! The lock family on Redis: the core's [`RwLease`] transitions run by one script
//! (`lua/rwlock.lua`) on the core's bytes, and blocking waits woken one waiter at a time.

use std::time::{Duration, Instant};

use redis::{aio, ConnectionLike, Value};
use sluicegate_core::limits::MAX_PERIOD;
use sluicegate_core::memory::WaitCancel;
use sluicegate_core::rwlock::{LockError, LockMode, Place, RwAcquired, RwLease, RwState};
use sluicegate_core::{Concurrency, Decision, Grant, LeaseRequest, ParamError, Ticks, SECOND};

use crate::error::{Error, INEXACT};
use crate::link::{block, typed, Awaiting, Blocking, Link};
use crate::lua::{rwlock_script, MAX_LUA_TICKS};
use crate::reply::corrupt;
use crate::route::{Program, Route};

/// How long a blocked caller's place lasts unless it asks again; it asks at half that.
pub const DEFAULT_PLACE_TTL: Ticks = 10 * SECOND;
/// How soon a cancelled blocking acquire notices, at most: its `BLPOP` waits no longer.
pub const CANCEL_POLL: Duration = Duration::from_millis(50);

/// Read-write, counted and exclusive locks, fair or not, on Redis: each call one
/// `EVALSHA` doing the core's exact transition on the core's bytes, at the server's time
/// (`TIME`) or the request's own.
///
/// A call after which the first waiter would be granted pushes one element to that
/// waiter's list (`{key}:wake:owner`, in the lock's hash slot), which
/// [`acquire_blocking`](Self::acquire_blocking) pops with `BLPOP`: a release wakes one
/// waiter, who asks once more. A list rather than `PUBLISH`: the wake waits in the list
/// if the waiter is between its denied ask and its `BLPOP` (a message would be lost),
/// and waiting takes no `SUBSCRIBE`/`UNSUBSCRIBE` round trips. Readers an unfair lock
/// refuses without a place name themselves in the set `{key}:readers`; a call after
/// which a reader would be granted pushes each of them one element to
/// `{key}:readers:wake`.
#[derive(Debug, Clone)]
pub struct RedisRwLock {
    lease: RwLease,
    prefix: Vec<u8>,
    place_ttl: Ticks,
    program: Program,
}

/// A call's answer and the waiter it woke.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handed<T> {
    /// The transition's answer, as the core gives it.
    pub answer: T,
    /// The owner of the waiter whose turn the call made (its list was pushed to).
    pub woken: Option<Vec<u8>>,
}

/// What a holder does to its lease ([`RedisRwLock::change`]).
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeldChange {
    /// Gives back one hold.
    Release,
    /// Extends it to the request's ttl from now.
    Renew,
    /// Turns a writer into a reader, keeping the token.
    Downgrade,
}

/// Which transition a call runs (the script's first argument).
#[derive(Debug, Clone, Copy)]
enum Op {
    Acquire(LockMode, Ticks),
    Try(LockMode),
    Held(HeldChange),
    Withdraw,
}

impl RedisRwLock {
    /// The lock `lease` (its holders' bound and fairness), on keys as given.
    pub fn new(lease: RwLease) -> Self {
        Self {
            lease,
            prefix: Vec::new(),
            place_ttl: DEFAULT_PLACE_TTL,
            program: Program::new(rwlock_script()),
        }
    }

    /// Calls take `route` instead of the fastest one the server offers: the function
    /// library, else scripts. The module has no lock family: with [`Route::Module`] calls
    /// take the library or scripts, as detected. Never an error today, as for
    /// [`RedisLeases::with_route`](crate::RedisLeases::with_route).
    pub fn with_route(mut self, route: Route) -> Result<Self, Error> {
        self.program.force(Some(route));
        Ok(self)
    }

    /// The route calls take; `None` before the first call detects it.
    pub fn route(&self) -> Option<Route> {
        self.program.lua_route()
    }

    /// Puts `prefix` before every key.
    pub fn with_prefix(mut self, prefix: impl Into<Vec<u8>>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// How long a blocked caller's place lasts if it stops asking (a dead waiter blocks
    /// a fair queue that long at most): 1 tick to 366 days.
    pub fn with_place_ttl(mut self, ttl: Ticks) -> Result<Self, ParamError> {
        self.place_ttl = in_period("place_ttl", ttl)?;
        Ok(self)
    }

    /// The lock's parameters.
    pub fn lease(&self) -> &RwLease {
        &self.lease
    }

    /// Grants the request's owner a lease in `mode`, or denies it and, with a `wait`,
    /// queues it (see [`RwLease::acquire`]) in a place lasting `wait` ticks; without
    /// one, a try that never queues.
    pub fn acquire<C: ConnectionLike>(
        &self,
        con: &mut C,
        request: &LeaseRequest<'_>,
        mode: LockMode,
        wait: Option<Ticks>,
    ) -> Result<Handed<RwAcquired>, Error> {
        block(self.acquire_on(&mut Blocking(con), request, mode, wait))
    }

    /// Asynchronous [`RedisRwLock::acquire`].
    pub async fn acquire_async<C: aio::ConnectionLike>(
        &self,
        con: &mut C,
        request: &LeaseRequest<'_>,
        mode: LockMode,
        wait: Option<Ticks>,
    ) -> Result<Handed<RwAcquired>, Error> {
        self.acquire_on(&mut Awaiting(con), request, mode, wait)
            .await
    }

    async fn acquire_on<L: Link>(
        &self,
        link: &mut L,
        request: &LeaseRequest<'_>,
        mode: LockMode,
        wait: Option<Ticks>,
    ) -> Result<Handed<RwAcquired>, Error> {
        let op = match wait {
            Some(wait) => Op::Acquire(mode, in_period("wait", wait).map_err(LockError::from)?),
            None => Op::Try(mode),
        };
        acquired(self.call(link, op, request).await?)
    }

    /// Changes the owner's unexpired lease: releases it once (it is freed when released
    /// as often as acquired), renews it to `now + ttl`, or turns it shared keeping its
    /// token.
    pub fn change<C: ConnectionLike>(
        &self,
        con: &mut C,
        request: &LeaseRequest<'_>,
        change: HeldChange,
    ) -> Result<Handed<Grant>, Error> {
        block(self.change_on(&mut Blocking(con), request, change))
    }

    /// Asynchronous [`RedisRwLock::change`].
    pub async fn change_async<C: aio::ConnectionLike>(
        &self,
        con: &mut C,
        request: &LeaseRequest<'_>,
        change: HeldChange,
    ) -> Result<Handed<Grant>, Error> {
        self.change_on(&mut Awaiting(con), request, change).await
    }

    async fn change_on<L: Link>(
        &self,
        link: &mut L,
        request: &LeaseRequest<'_>,
        change: HeldChange,
    ) -> Result<Handed<Grant>, Error> {
        held(self.call(link, Op::Held(change), request).await?)
    }

    /// Gives up the owner's place in the queue.
    pub fn withdraw<C: ConnectionLike>(
        &self,
        con: &mut C,
        request: &LeaseRequest<'_>,
    ) -> Result<Option<Vec<u8>>, Error> {
        block(self.withdraw_on(&mut Blocking(con), request))
    }

    /// Asynchronous [`RedisRwLock::withdraw`].
    pub async fn withdraw_async<C: aio::ConnectionLike>(
        &self,
        con: &mut C,
        request: &LeaseRequest<'_>,
    ) -> Result<Option<Vec<u8>>, Error> {
        self.withdraw_on(&mut Awaiting(con), request).await
    }

    async fn withdraw_on<L: Link>(
        &self,
        link: &mut L,
        request: &LeaseRequest<'_>,
    ) -> Result<Option<Vec<u8>>, Error> {
        let reply = self.call(link, Op::Withdraw, request).await?;
        let [woken] = fields::<1>(reply)?;
        owner_of(woken)
    }

    /// A lease in `mode` for the request's ttl, waiting up to `timeout`: asks, and while
    /// denied sleeps in `BLPOP` on its own list until a call makes its turn, the
    /// blocking holders expire, or it must renew its place; on the deadline it gives up
    /// its place. With `cancel`, a [`WaitCancel`] cancelled from another thread or task
    /// ends the wait within [`CANCEL_POLL`] with [`Error::Cancelled`], its place given up.
    /// Takes the connection for the whole wait (`BLPOP` blocks it). Always at the
    /// server's time.
    pub fn acquire_blocking<C: ConnectionLike>(
        &self,
        con: &mut C,
        request: &LeaseRequest<'_>,
        mode: LockMode,
        timeout: Duration,
        cancel: Option<&WaitCancel>,
    ) -> Result<RwAcquired, Error> {
        let link = &mut Blocking(con);
        block(self.acquire_blocking_on(link, request, mode, timeout, cancel))
    }

    /// Asynchronous [`RedisRwLock::acquire_blocking`]. `BLPOP` holds the connection: give
    /// each waiter one of its own, not a multiplexed one other calls share, and a
    /// response timeout above half the place's ttl. A waiter dropped before its answer
    /// keeps its place until the place expires, unless [`withdraw_async`](Self::withdraw_async)
    /// gives it up.
    pub async fn acquire_blocking_async<C: aio::ConnectionLike>(
        &self,
        con: &mut C,
        request: &LeaseRequest<'_>,
        mode: LockMode,
        timeout: Duration,
        cancel: Option<&WaitCancel>,
    ) -> Result<RwAcquired, Error> {
        self.acquire_blocking_on(&mut Awaiting(con), request, mode, timeout, cancel)
            .await
    }

    async fn acquire_blocking_on<L: Link>(
        &self,
        link: &mut L,
        request: &LeaseRequest<'_>,
        mode: LockMode,
        timeout: Duration,
        cancel: Option<&WaitCancel>,
    ) -> Result<RwAcquired, Error> {
        let request = LeaseRequest::new(request.key)
            .owner(request.owner)
            .ttl(request.ttl);
        let deadline = Instant::now().checked_add(timeout);
        let lock = [&self.prefix, request.key].concat();
        let own = beside(&lock, &[b":wake:".as_slice(), request.owner].concat());
        let readers = beside(&lock, b":readers:wake");
        let cancelled = || cancel.is_some_and(WaitCancel::is_cancelled);
        loop {
            if cancelled() {
                self.give_up(link, &request).await?;
                return Err(Error::Cancelled);
            }
            let left = deadline.map_or(Duration::MAX, |at| {
                at.saturating_duration_since(Instant::now())
            });
            let wait = (!left.is_zero()).then_some(self.place_ttl);
            let acquired = self.acquire_on(link, &request, mode, wait).await?.answer;
            if acquired.grant.is_some() || left.is_zero() {
                if acquired.grant.is_none() {
                    self.give_up(link, &request).await?;
                }
                return Ok(acquired);
            }
            let retry = acquired.decision.retry_after.unwrap_or(self.place_ttl);
            let mut pause = left
                .min(Duration::from_micros(retry.max(1)))
                .min(Duration::from_micros(self.place_ttl / 2).max(Duration::from_millis(1)));
            if cancel.is_some() {
                pause = pause.min(CANCEL_POLL);
            }
            // Queued, its own list; an unfair lock's reader, the readers' list.
            let list = if acquired.place.is_some() {
                &own
            } else {
                &readers
            };
            let mut pop = redis::cmd("BLPOP");
            // BLPOP's timeout is in seconds; 0 would block for ever.
            pop.arg(list).arg(pause.as_secs_f64().max(0.001));
            link.send(&pop)
                .await
                .map_err(|e| Error::from_redis(e, request.key))?;
        }
    }

    /// Withdraws the caller's place, if it has one: a wait that ends without a grant
    /// would otherwise block the queue until the place expired.
    async fn give_up<L: Link>(
        &self,
        link: &mut L,
        request: &LeaseRequest<'_>,
    ) -> Result<(), Error> {
        match self.withdraw_on(link, request).await {
            Ok(_) | Err(Error::Lock(LockError::NotQueued)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// The state stored for `key`, decoded by the core; `None` when fresh.
    pub fn state<C: ConnectionLike>(
        &self,
        con: &mut C,
        key: &[u8],
    ) -> Result<Option<RwState>, Error> {
        block(self.state_on(&mut Blocking(con), key))
    }

    /// Asynchronous [`RedisRwLock::state`].
    pub async fn state_async<C: aio::ConnectionLike>(
        &self,
        con: &mut C,
        key: &[u8],
    ) -> Result<Option<RwState>, Error> {
        self.state_on(&mut Awaiting(con), key).await
    }

    async fn state_on<L: Link>(&self, link: &mut L, key: &[u8]) -> Result<Option<RwState>, Error> {
        let get = redis::cmd("GET")
            .arg([&self.prefix, key].concat())
            .to_owned();
        let bytes: Option<Vec<u8>> =
            typed(link.send(&get).await).map_err(|e| Error::from_redis(e, key))?;
        bytes
            .map(|b| {
                self.lease
                    .decode(&b)
                    .map_err(|e| corrupt(key, e.to_string()))
            })
            .transpose()
    }

    /// The script every call runs on [`Route::Scripts`].
    pub fn script(&self) -> &str {
        self.program.source()
    }

    /// Runs `op` for `request`, after the core's own checks; a script's report of a
    /// corrupt state is replaced by the core decoder's verdict on the same bytes.
    async fn call<L: Link>(
        &self,
        link: &mut L,
        op: Op,
        request: &LeaseRequest<'_>,
    ) -> Result<Value, Error> {
        let ttl = match op {
            Op::Acquire(..) | Op::Try(_) | Op::Held(HeldChange::Renew) => request.ttl,
            _ => 1,
        };
        Concurrency::check(request.owner, ttl).map_err(|e| match e {
            sluicegate_core::LeaseError::Param(p) => Error::Lock(p.into()),
            other => Error::Lease(other),
        })?;
        if let Some(now) = request.now.filter(|&now| now > MAX_LUA_TICKS) {
            return Err(Error::OutOfRange {
                what: "now",
                value: now,
                max: MAX_LUA_TICKS,
                reason: INEXACT,
            });
        }
        let (name, mode, wait) = match op {
            Op::Acquire(mode, wait) => ("acquire", Some(mode), Some(wait)),
            Op::Try(mode) => ("try", Some(mode), None),
            Op::Held(HeldChange::Release) => ("release", None, None),
            Op::Held(HeldChange::Renew) => ("renew", None, None),
            Op::Held(HeldChange::Downgrade) => ("downgrade", None, None),
            Op::Withdraw => ("withdraw", None, None),
        };
        let key = [&self.prefix, request.key].concat();
        let mut invocation = self.program.invocation("rwlock", false, &[&key]);
        invocation
            .cmd
            .arg(name)
            .arg(request.now.map_or(String::new(), |n| n.to_string()))
            .arg(self.lease.max_holders())
            .arg(u8::from(self.lease.is_fair()))
            .arg(request.owner)
            .arg(mode.map_or(0, |m| u8::from(m == LockMode::Exclusive)))
            .arg(ttl)
            .arg(wait.unwrap_or(0));
        match self.program.query(link, &invocation).await {
            Ok(reply) => Ok(reply),
            Err(e) => match Error::from_redis(e, request.key) {
                Error::Corrupt { reason, .. } => {
                    Err(match self.state_on(link, request.key).await {
                        Err(e) => e,
                        Ok(_) => corrupt(
                            request.key,
                            format!("beyond the Redis scripts' range ({reason})"),
                        ),
                    })
                }
                e => Err(e),
            },
        }
    }
}

/// `value` if it is a duration the core takes (1 tick to 366 days).
fn in_period(name: &'static str, value: Ticks) -> Result<Ticks, ParamError> {
    if (1..=MAX_PERIOD).contains(&value) {
        return Ok(value);
    }
    Err(ParamError::OutOfRange {
        name,
        value,
        min: 1,
        max: MAX_PERIOD,
    })
}

/// A key beside `key` in its hash slot, as the script names it: `key`'s hash tag kept
/// (or `key` made one), then `suffix`.
fn beside(key: &[u8], suffix: &[u8]) -> Vec<u8> {
    let open = key.iter().position(|&b| b == b'{');
    let tagged = open.is_some_and(|open| {
        let close = key[open + 1..].iter().position(|&b| b == b'}');
        close.is_some_and(|close| close > 0)
    });
    if tagged {
        [key, suffix].concat()
    } else {
        [b"{", key, b"}", suffix].concat()
    }
}

fn fields<const N: usize>(reply: Value) -> Result<[Value; N], Error> {
    let Value::Array(items) = reply else {
        return Err(Error::Reply);
    };
    items.try_into().map_err(|_| Error::Reply)
}

fn number(value: &Value) -> Result<u64, Error> {
    match value {
        Value::Int(n) => u64::try_from(*n).map_err(|_| Error::Reply),
        _ => Err(Error::Reply),
    }
}

fn owner_of(value: Value) -> Result<Option<Vec<u8>>, Error> {
    match value {
        Value::Nil => Ok(None),
        Value::BulkString(owner) => Ok(Some(owner)),
        _ => Err(Error::Reply),
    }
}

/// allowed, max, remaining, retry, reset, token, expiry, holds, place, ahead, place
/// expiry, woken owner.
fn acquired(reply: Value) -> Result<Handed<RwAcquired>, Error> {
    let [allowed, max, remaining, retry, reset, token, expiry, holds, place, ahead, until, woken] =
        fields::<12>(reply)?;
    let (max, remaining, reset) = (number(&max)?, number(&remaining)?, number(&reset)?);
    let (decision, grant) = if number(&allowed)? == 1 {
        let grant = Grant::new(number(&token)?, number(&expiry)?, number(&holds)?);
        (Decision::admit(max, remaining, reset, 0), Some(grant))
    } else {
        let retry = Some(number(&retry)?);
        (Decision::deny(max, remaining, retry, reset), None)
    };
    let place = match number(&place)? {
        0 => None,
        n => Some(Place::new(n, number(&ahead)?, number(&until)?)),
    };
    Ok(Handed {
        answer: RwAcquired::new(decision, grant, place),
        woken: owner_of(woken)?,
    })
}

/// token, expiry, holds, woken owner.
fn held(reply: Value) -> Result<Handed<Grant>, Error> {
    let [token, expiry, holds, woken] = fields::<4>(reply)?;
    Ok(Handed {
        answer: Grant::new(number(&token)?, number(&expiry)?, number(&holds)?),
        woken: owner_of(woken)?,
    })
}

impl From<LockError> for Error {
    fn from(error: LockError) -> Self {
        Self::Lock(error)
    }
}
