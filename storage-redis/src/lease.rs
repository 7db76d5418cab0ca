//! Leases on Redis: the core's [`Concurrency`] transitions run by one script
//! (`lua/lease.lua`) on the core's bytes, at the server's clock or an explicit time.

use std::slice;

use redis::{aio, ConnectionLike, Value};
use sluicegate_core::{
    Acquired, Concurrency, Decision, Grant, LeaseError, LeaseRequest, LeaseState, Ticks,
};

use crate::call::Arg;
use crate::error::Error;
use crate::key::RedisKey;
use crate::link::{block, typed, Awaiting, Blocking, Link};
use crate::lua::MAX_LUA_TICKS;
use crate::reply::{self, corrupt};
use crate::route::{Invocation, Program, Route};

/// Leases whose tables live in Redis: at most `max` holders per key (a lock when `max` is
/// 1), owner-checked release and renew, fencing tokens that never repeat on a key.
///
/// Each call is one `EVALSHA` of one script doing the core's exact transition on the
/// core's bytes. At the server's time (`TIME`) a key lives until its state is fresh: no
/// lease held and the clock past its last token, so a token granted after the key is
/// gone is still larger. At a request's own time (tests, replays) the key has no
/// expiry, as every state written at an explicit time.
///
/// Several keys given at once are decided together, all or nothing (a multi-key lock);
/// on Redis Cluster they must share a hash tag (`{orders}:1`, `{orders}:2`), so one node
/// holds them all (and the prefix must hold no `{`, or its braces would be the tag).
#[derive(Debug, Clone)]
pub struct RedisLeases {
    concurrency: Concurrency,
    prefix: Vec<u8>,
    program: Program,
    durable: Option<Durable>,
}

/// Grants returned only once replicas hold them (see [`RedisLeases::with_replicas`]).
#[derive(Debug, Clone, Copy)]
struct Durable {
    replicas: u32,
    timeout_ms: u64,
}

/// Which transition a call runs (the script's first argument).
#[derive(Debug, Clone, Copy)]
enum Op {
    Acquire,
    Release,
    Renew,
    Read,
}

impl Op {
    /// Its function in the library (see `lua/library.lua`).
    fn function(self) -> &'static str {
        match self {
            Self::Read => "lease_read",
            op => op.name(),
        }
    }

    /// Its command in the module (one key), if it has one.
    fn module_command(self) -> Option<&'static str> {
        match self {
            Self::Acquire => Some("SLUICEGATE.LEASE.ACQUIRE"),
            Self::Release => Some("SLUICEGATE.LEASE.RELEASE"),
            Self::Renew => Some("SLUICEGATE.LEASE.RENEW"),
            Self::Read => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Acquire => "acquire",
            Self::Release => "release",
            Self::Renew => "renew",
            Self::Read => "read",
        }
    }
}

/// Whose leases a call is about, on which keys, and at what time (`None`: the server's).
#[derive(Debug, Clone, Copy)]
struct Holder<'a> {
    keys: &'a [&'a [u8]],
    owner: &'a [u8],
    now: Option<Ticks>,
}

impl<'a> Holder<'a> {
    /// The owner `request` names, on its one key.
    fn of(request: &'a LeaseRequest<'a>) -> Self {
        Self {
            keys: slice::from_ref(&request.key),
            owner: request.owner,
            now: request.now,
        }
    }

    /// `owner` on every key of `keys`, at the server's time.
    fn all(keys: &'a [&'a [u8]], owner: &'a [u8]) -> Self {
        Self {
            keys,
            owner,
            now: None,
        }
    }
}

impl RedisLeases {
    /// Leases of `concurrency` (any `max` the core takes: tokens and instants stay below
    /// 2^53, exact in Lua, until [`MAX_LUA_TICKS`]).
    pub fn new(concurrency: Concurrency) -> Self {
        Self {
            concurrency,
            program: Program::new(crate::lua::lease_script()),
            prefix: Vec::new(),
            durable: None,
        }
    }

    /// Returns a grant (an acquire, a renew) only once `replicas` replicas acknowledged
    /// it, waiting at most `timeout` (Redis's `WAIT`, sent after the grant on the same
    /// connection). Redis replicates asynchronously: without this, a failover can promote
    /// a replica that never saw the grant, and a second holder gets the lock. A grant
    /// not acknowledged in time is given back (released) and the call is
    /// [`Error::NotReplicated`], so the caller never holds a lease the next primary may
    /// not know. It costs a second round trip and the replicas' acknowledgement on each
    /// grant (see docs/redis.md for figures); denials and releases do not wait. Fencing
    /// tokens are monotonic across a failover without it (they are at least the server's
    /// time), so this guards mutual exclusion, not the tokens. On Redis Cluster `WAIT`
    /// goes to the node the connection routes it to: use it with one primary (or
    /// Sentinel).
    pub fn with_replicas(mut self, replicas: u32, timeout: std::time::Duration) -> Self {
        let timeout_ms = u64::try_from(timeout.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        self.durable = (replicas > 0).then_some(Durable {
            replicas,
            timeout_ms,
        });
        self
    }

    /// Puts `prefix` before every key.
    pub fn with_prefix(mut self, prefix: impl Into<Vec<u8>>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// The lease model.
    pub fn concurrency(&self) -> &Concurrency {
        &self.concurrency
    }

    /// Calls take `route` instead of the fastest one the server offers. With
    /// [`Route::Module`] on a server without the module, calls fail (`unknown command`).
    /// Never an error today; the `Result` leaves room for routes a build cannot take.
    pub fn with_route(mut self, route: Route) -> Result<Self, Error> {
        self.program.force(Some(route));
        Ok(self)
    }

    /// The route calls take (see [`RedisLimiter::route`](crate::RedisLimiter::route)).
    pub fn route(&self) -> Option<Route> {
        self.program.route()
    }

    /// The script every call runs on [`Route::Scripts`].
    pub fn script(&self) -> &str {
        self.program.source()
    }

    /// Grants the request's owner a lease on its key for its ttl if fewer than `max` are
    /// held, or re-enters the one it holds (see [`Concurrency::acquire`]); at the
    /// request's own time if it has one, else at the server's.
    pub fn acquire<C: ConnectionLike>(
        &self,
        con: &mut C,
        request: &LeaseRequest<'_>,
    ) -> Result<Acquired, Error> {
        block(self.acquire_on(&mut Blocking(con), request))
    }

    /// Asynchronous [`RedisLeases::acquire`].
    pub async fn acquire_async<C: aio::ConnectionLike>(
        &self,
        con: &mut C,
        request: &LeaseRequest<'_>,
    ) -> Result<Acquired, Error> {
        self.acquire_on(&mut Awaiting(con), request).await
    }

    /// [`RedisLeases::acquire`] over `link`.
    async fn acquire_on<L: Link>(
        &self,
        link: &mut L,
        request: &LeaseRequest<'_>,
    ) -> Result<Acquired, Error> {
        let cmd = self.single(Op::Acquire, request)?;
        let acquired = acquired(self.run(link, &cmd, &[request.key]).await?).map(one)?;
        if acquired.grant.is_some() {
            self.replicated(link, Holder::of(request)).await?;
        }
        Ok(acquired)
    }

    /// Acquires a lease on every key of `keys` or on none, in one script (a multi-key
    /// lock). Denied if any key is full. The decision covers all keys (`remaining` the
    /// fewest leases still free on a key, `retry_after` the longest wait on a full key,
    /// `reset_after` the longest time until a key is fresh); the grants are one per key,
    /// in the order given, and empty when denied.
    pub fn acquire_all<C: ConnectionLike>(
        &self,
        con: &mut C,
        keys: &[&[u8]],
        owner: &[u8],
        ttl: Ticks,
    ) -> Result<(Decision, Vec<Grant>), Error> {
        let link = &mut Blocking(con);
        let holder = Holder::all(keys, owner);
        let cmd = self.command(Op::Acquire, holder, Some(ttl))?;
        let (decision, grants) = acquired(block(self.run(link, &cmd, keys))?)?;
        if !grants.is_empty() {
            block(self.replicated(link, holder))?;
        }
        Ok((decision, grants))
    }

    /// Releases the owner's lease on the request's key once; it is freed when released
    /// as often as acquired. [`LeaseError::NotHeld`] (nothing changed) if the owner
    /// holds none.
    pub fn release<C: ConnectionLike>(
        &self,
        con: &mut C,
        request: &LeaseRequest<'_>,
    ) -> Result<Grant, Error> {
        block(self.release_on(&mut Blocking(con), Holder::of(request))).map(first)
    }

    /// Asynchronous [`RedisLeases::release`].
    pub async fn release_async<C: aio::ConnectionLike>(
        &self,
        con: &mut C,
        request: &LeaseRequest<'_>,
    ) -> Result<Grant, Error> {
        let link = &mut Awaiting(con);
        self.release_on(link, Holder::of(request)).await.map(first)
    }

    /// Releases `owner`'s lease on every key of `keys` once, or, if it holds none on some
    /// key, nothing.
    pub fn release_all<C: ConnectionLike>(
        &self,
        con: &mut C,
        keys: &[&[u8]],
        owner: &[u8],
    ) -> Result<Vec<Grant>, Error> {
        block(self.release_on(&mut Blocking(con), Holder::all(keys, owner)))
    }

    /// Releases the holder's lease on each of its keys over `link`.
    async fn release_on<L: Link>(
        &self,
        link: &mut L,
        holder: Holder<'_>,
    ) -> Result<Vec<Grant>, Error> {
        let cmd = self.command(Op::Release, holder, None)?;
        held(self.run(link, &cmd, holder.keys).await?)
    }

    /// Extends the owner's unexpired lease on the request's key to `now + ttl`; its
    /// token stays. [`LeaseError::NotHeld`] if it expired: its holder must stop acting
    /// on it.
    pub fn renew<C: ConnectionLike>(
        &self,
        con: &mut C,
        request: &LeaseRequest<'_>,
    ) -> Result<Grant, Error> {
        block(self.renew_on(&mut Blocking(con), Holder::of(request), request.ttl)).map(first)
    }

    /// Asynchronous [`RedisLeases::renew`].
    pub async fn renew_async<C: aio::ConnectionLike>(
        &self,
        con: &mut C,
        request: &LeaseRequest<'_>,
    ) -> Result<Grant, Error> {
        self.renew_on(&mut Awaiting(con), Holder::of(request), request.ttl)
            .await
            .map(first)
    }

    /// Renews `owner`'s leases on every key of `keys`, or, if one is gone, none.
    pub fn renew_all<C: ConnectionLike>(
        &self,
        con: &mut C,
        keys: &[&[u8]],
        owner: &[u8],
        ttl: Ticks,
    ) -> Result<Vec<Grant>, Error> {
        block(self.renew_on(&mut Blocking(con), Holder::all(keys, owner), ttl))
    }

    /// Renews the holder's leases on each of its keys for `ttl` over `link`, then waits
    /// for the replicas (see [`RedisLeases::with_replicas`]).
    async fn renew_on<L: Link>(
        &self,
        link: &mut L,
        holder: Holder<'_>,
        ttl: Ticks,
    ) -> Result<Vec<Grant>, Error> {
        let cmd = self.command(Op::Renew, holder, Some(ttl))?;
        let grants = held(self.run(link, &cmd, holder.keys).await?)?;
        self.replicated(link, holder).await?;
        Ok(grants)
    }

    /// Acquires many leases, each request on its own, in one pipelined round trip (one
    /// connection, so one node on a cluster). The outer error is the connection's; each
    /// request has its own result.
    pub fn acquire_batch<C: ConnectionLike>(
        &self,
        con: &mut C,
        requests: &[LeaseRequest<'_>],
    ) -> Result<Vec<Result<Acquired, Error>>, Error> {
        let results = self.batch(con, Op::Acquire, requests, |r| acquired(r).map(one))?;
        self.batch_replicated(con, requests, results)
    }

    /// Releases many leases, each request on its own, in one pipelined round trip.
    pub fn release_batch<C: ConnectionLike>(
        &self,
        con: &mut C,
        requests: &[LeaseRequest<'_>],
    ) -> Result<Vec<Result<Grant, Error>>, Error> {
        self.batch(con, Op::Release, requests, |r| held(r).map(first))
    }

    /// Sends the valid commands `op` makes of `requests` in one pipeline, each reply read
    /// with `parse`; a call the server had no script for goes again alone, as `EVAL`.
    fn batch<C: ConnectionLike, T>(
        &self,
        con: &mut C,
        op: Op,
        requests: &[LeaseRequest<'_>],
        parse: impl Fn(Value) -> Result<T, Error>,
    ) -> Result<Vec<Result<T, Error>>, Error> {
        let calls: Vec<_> = requests
            .iter()
            .map(|request| (self.single(op, request), request.key))
            .collect();
        let module = block(self.program.detect(&mut Blocking(&mut *con)))
            .map_err(|e| Error::from_redis(e, b""))?;
        // Written straight into one buffer, as a pipeline would be, without copying
        // each command into a pipeline first.
        let mut packed = Vec::with_capacity(160 * calls.len());
        let mut sent = 0;
        for cmd in calls.iter().filter_map(|(cmd, _)| cmd.as_ref().ok()) {
            let module = cmd.module.as_ref().filter(|_| module);
            module.unwrap_or(&cmd.cmd).write_packed_command(&mut packed);
            sent += 1;
        }
        let mut replies = if sent == 0 {
            Vec::new()
        } else {
            con.req_packed_commands(&packed, 0, sent)
                .map_err(|e| Error::from_redis(e, b""))?
        }
        .into_iter();
        let mut results = Vec::with_capacity(calls.len());
        let link = &mut Blocking(con);
        for (cmd, key) in calls {
            // Invalid calls were not sent: only valid ones take a reply.
            let reply = cmd.map(|cmd| (replies.next(), cmd));
            let result = match reply {
                Err(e) => Err(e),
                Ok((None, _)) => Err(Error::Reply),
                Ok((Some(reply), cmd)) if self.program.must_retry(&reply) => {
                    block(self.run(link, &cmd, &[key]))
                }
                // A corrupt key is explained by the core's decoder, as in `run`.
                Ok((Some(Value::ServerError(e)), cmd)) => match Error::from_redis(e.into(), key) {
                    Error::Corrupt { .. } => block(self.run(link, &cmd, &[key])),
                    e => Err(e),
                },
                Ok((Some(reply), _)) => Ok(reply),
            };
            results.push(result.and_then(&parse));
        }
        Ok(results)
    }

    /// The lease table stored for `key`, decoded by the core; `None` when fresh. A key
    /// holding anything else is an error, never "fresh".
    pub fn state<C: ConnectionLike>(
        &self,
        con: &mut C,
        key: &[u8],
    ) -> Result<Option<LeaseState>, Error> {
        let values = block(self.read(&mut Blocking(con), &[key]))?;
        self.table(key, values)
    }

    /// Asynchronous [`RedisLeases::state`].
    pub async fn state_async<C: aio::ConnectionLike>(
        &self,
        con: &mut C,
        key: &[u8],
    ) -> Result<Option<LeaseState>, Error> {
        let values = self.read(&mut Awaiting(con), &[key]).await?;
        self.table(key, values)
    }

    /// `key`'s lease table from its value as read.
    fn table(&self, key: &[u8], values: Vec<Option<Vec<u8>>>) -> Result<Option<LeaseState>, Error> {
        match values.first() {
            Some(Some(bytes)) => self
                .concurrency
                .decode(bytes)
                .map(Some)
                .map_err(|e| corrupt(key, e.to_string())),
            _ => Ok(None),
        }
    }

    /// The call `op` makes of `request` on its one key (a release takes no ttl).
    fn single(&self, op: Op, request: &LeaseRequest<'_>) -> Result<Invocation, Error> {
        let ttl = (!matches!(op, Op::Release)).then_some(request.ttl);
        self.command(op, Holder::of(request), ttl)
    }

    /// The script call of `op` for `holder` (`ttl` for an acquire or a renew), after
    /// checking what the core checks (the owner's length, the ttl) and the scripts' time
    /// range.
    fn command(&self, op: Op, holder: Holder<'_>, ttl: Option<Ticks>) -> Result<Invocation, Error> {
        let Holder { keys, owner, now } = holder;
        if !matches!(op, Op::Read) {
            // The core's own checks: a typed error, nothing sent.
            Concurrency::check(owner, ttl.unwrap_or(1))?;
        }
        if keys.is_empty() {
            return Err(Error::NoKeys);
        }
        if let Some(now) = now.filter(|&now| now > MAX_LUA_TICKS) {
            return Err(Error::OutOfRange {
                what: "now",
                value: now,
                max: MAX_LUA_TICKS,
                reason: crate::error::INEXACT,
            });
        }
        let module = match (keys, op.module_command()) {
            ([key], Some(name)) if self.program.may_use_module() => {
                // Room for every argument at once, not grown by doubling.
                let size = 96 + self.prefix.len() + key.len() + owner.len();
                let mut module = redis::Cmd::with_capacity(8, size);
                module
                    .arg(name)
                    .arg(RedisKey::new(&self.prefix, key))
                    .arg(self.concurrency.max())
                    .arg(owner);
                if let Some(ttl) = ttl.filter(|_| !matches!(op, Op::Release)) {
                    module.arg(ttl);
                }
                // One bulk string to parse, not ten integers.
                module.arg("PACKED");
                if let Some(now) = now {
                    module.arg("NOW").arg(now);
                }
                Some(module)
            }
            _ => None,
        };
        let read_only = matches!(op, Op::Read);
        match module {
            // With the module known to be loaded, its command is the one sent: the
            // library's call is not built.
            Some(module) if self.program.route() == Some(Route::Module) => {
                Ok(self.program.native(op.function(), read_only, module))
            }
            module => {
                let keys: Vec<RedisKey> = keys
                    .iter()
                    .map(|k| RedisKey::new(&self.prefix, k))
                    .collect();
                let mut call = self.program.invocation(op.function(), read_only, &keys);
                call.cmd
                    .arg(op.name())
                    .arg(Arg(now))
                    .arg(self.concurrency.max())
                    .arg(owner)
                    .arg(Arg(ttl));
                call.module = module;
                Ok(call)
            }
        }
    }

    /// With [`RedisLeases::with_replicas`]: waits for the replicas to acknowledge the
    /// grant just made to `holder`; if too few do in time, releases it (at the same time)
    /// and fails.
    async fn replicated<L: Link>(&self, link: &mut L, holder: Holder<'_>) -> Result<(), Error> {
        let Some(durable) = self.durable else {
            return Ok(());
        };
        let error = match durable.wait(link).await {
            Ok(None) => return Ok(()),
            Ok(Some(acknowledged)) => durable.error(acknowledged),
            Err(e) => Error::from_redis(e, first_key(holder.keys)),
        };
        // Given back on a best-effort basis: if this fails too, the lease expires.
        let _ = self.release_on(link, holder).await;
        Err(error)
    }

    /// [`RedisLeases::replicated`] for the `results` of acquiring `requests`: if too few
    /// replicas acknowledge them in time, every grant of the batch is given back, and
    /// fails alike.
    fn batch_replicated<C: ConnectionLike>(
        &self,
        con: &mut C,
        requests: &[LeaseRequest<'_>],
        mut results: Vec<Result<Acquired, Error>>,
    ) -> Result<Vec<Result<Acquired, Error>>, Error> {
        let granted = |r: &Result<Acquired, Error>| matches!(r, Ok(a) if a.grant.is_some());
        if let (Some(durable), true) = (self.durable, results.iter().any(granted)) {
            let waited = block(durable.wait(&mut Blocking(&mut *con)));
            if !matches!(waited, Ok(None)) {
                let given_back: Vec<_> = (requests.iter().zip(&results))
                    .filter(|(_, r)| granted(r))
                    .map(|(request, _)| *request)
                    .collect();
                let _ = self.release_batch(con, &given_back);
                let acknowledged = waited.map_err(|e| Error::from_redis(e, b""))?;
                for result in results.iter_mut().filter(|r| granted(r)) {
                    *result = Err(durable.error(acknowledged.unwrap_or_default()));
                }
            }
        }
        Ok(results)
    }

    /// Sends `cmd` for `keys`; a script's report of a corrupt table is replaced by the
    /// core decoder's verdict on the same bytes.
    async fn run<L: Link>(
        &self,
        link: &mut L,
        cmd: &Invocation,
        keys: &[&[u8]],
    ) -> Result<Value, Error> {
        let reply = self.program.query(link, cmd).await;
        match reply.map_err(|e| Error::from_redis(e, first_key(keys))) {
            Err(Error::Corrupt { reason, .. }) => {
                Err(self.diagnose(keys, self.read(link, keys).await, reason))
            }
            reply => reply,
        }
    }

    /// The values of `keys` (`None`: absent), refusing other Redis types.
    async fn read<L: Link>(
        &self,
        link: &mut L,
        keys: &[&[u8]],
    ) -> Result<Vec<Option<Vec<u8>>>, Error> {
        let cmd = self.command(Op::Read, Holder::all(keys, b""), None)?;
        let reply = self.program.query(link, &cmd).await;
        reply::values(reply.map_err(|e| Error::from_redis(e, first_key(keys)))?)
    }

    /// The core decoder's reason why some key's bytes, as `read`, are no lease table; if
    /// the core reads them all, they are beyond the script's range, as it said.
    fn diagnose(
        &self,
        keys: &[&[u8]],
        read: Result<Vec<Option<Vec<u8>>>, Error>,
        script: String,
    ) -> Error {
        let values = match read {
            Ok(values) => values,
            Err(e) => return e,
        };
        for (key, value) in keys.iter().zip(&values) {
            if let Some(Err(e)) = value.as_deref().map(|b| self.concurrency.decode(b)) {
                return corrupt(key, e.to_string());
            }
        }
        corrupt(
            first_key(keys),
            format!("beyond the Redis scripts' range ({script})"),
        )
    }
}

/// The key errors name: the first of a call's.
fn first_key<'a>(keys: &[&'a [u8]]) -> &'a [u8] {
    keys.first().copied().unwrap_or_default()
}

fn first(mut grants: Vec<Grant>) -> Grant {
    // The script replies one lease per key; a call on one key has one.
    grants.swap_remove(0)
}

/// A call on one key: its decision and its grant, if any.
fn one((decision, grants): (Decision, Vec<Grant>)) -> Acquired {
    Acquired::new(decision, grants.first().copied())
}

/// The module's reply for its one key: `N` integers, as an array or, `PACKED`, as one
/// string of eight bytes each; `None` for another shape (the scripts' rows).
fn flat<const N: usize>(reply: &Value) -> Option<[i64; N]> {
    let mut fields = [0; N];
    match reply {
        Value::BulkString(bytes) if bytes.len() == 8 * N => {
            for (field, bytes) in fields.iter_mut().zip(bytes.chunks_exact(8)) {
                *field = i64::from_be_bytes(bytes.try_into().ok()?);
            }
        }
        Value::Array(items) if items.len() == N => {
            for (field, item) in fields.iter_mut().zip(items) {
                let Value::Int(value) = item else {
                    return None;
                };
                *field = *value;
            }
        }
        _ => return None,
    }
    Some(fields)
}

/// The scripts' reply: one row of `N` integers per key.
fn rows<const N: usize>(reply: Value) -> Result<Vec<[i64; N]>, Error> {
    let rows: Vec<Vec<i64>> = redis::from_redis_value(reply).map_err(|_| Error::Reply)?;
    rows.into_iter()
        .map(|row| <[i64; N]>::try_from(row).map_err(|_| Error::Reply))
        .collect()
}

fn unsigned(v: i64) -> Result<u64, Error> {
    u64::try_from(v).map_err(|_| Error::Reply)
}

/// Per key: allowed, max, remaining, retry, reset, token, expiry, holds.
fn acquired(reply: Value) -> Result<(Decision, Vec<Grant>), Error> {
    // The module's one row: the decision's 5 fields (then delay and time), the grant's 3.
    let rows = match flat(&reply) {
        Some([ok, max, free, wait, fresh, _delay, _now, token, expires_at, holds]) => {
            vec![[ok, max, free, wait, fresh, token, expires_at, holds]]
        }
        None => rows(reply)?,
    };
    let mut grants = Vec::with_capacity(rows.len());
    let (mut allowed, mut limit, mut remaining) = (true, 0, u64::MAX);
    let (mut retry, mut reset) = (0, 0);
    for [ok, max, free, wait, fresh, token, expires_at, holds] in rows {
        allowed &= ok == 1;
        limit = unsigned(max)?;
        remaining = remaining.min(unsigned(free)?);
        retry = retry.max(unsigned(wait)?);
        reset = reset.max(unsigned(fresh)?);
        grants.push(Grant::new(
            unsigned(token)?,
            unsigned(expires_at)?,
            unsigned(holds)?,
        ));
    }
    if grants.is_empty() {
        return Err(Error::Reply);
    }
    let decision = if allowed {
        Decision::admit(limit, remaining, reset, 0)
    } else {
        grants.clear();
        Decision::deny(limit, remaining, Some(retry), reset)
    };
    Ok((decision, grants))
}

/// Per key: token, expiry, holds.
fn held(reply: Value) -> Result<Vec<Grant>, Error> {
    // The module's one row: the grant's 3 fields, then the time.
    let rows = match flat(&reply) {
        Some([token, expires_at, holds, _now]) => vec![[token, expires_at, holds]],
        None => rows(reply)?,
    };
    if rows.is_empty() {
        return Err(Error::Reply);
    }
    rows.into_iter()
        .map(|[token, expires_at, holds]| {
            Ok(Grant::new(
                unsigned(token)?,
                unsigned(expires_at)?,
                unsigned(holds)?,
            ))
        })
        .collect()
}

impl Durable {
    /// `None` once enough replicas acknowledged what this connection wrote; else how
    /// many did.
    async fn wait<L: Link>(self, link: &mut L) -> redis::RedisResult<Option<u64>> {
        let acknowledged: u64 = typed(link.send(&self.command()).await)?;
        Ok((acknowledged < u64::from(self.replicas)).then_some(acknowledged))
    }

    fn command(self) -> redis::Cmd {
        let mut wait = redis::cmd("WAIT");
        wait.arg(self.replicas).arg(self.timeout_ms);
        wait
    }

    fn error(self, acknowledged: u64) -> Error {
        Error::NotReplicated {
            acknowledged,
            wanted: self.replicas,
        }
    }
}

impl From<LeaseError> for Error {
    fn from(error: LeaseError) -> Self {
        Self::Lease(error)
    }
}
