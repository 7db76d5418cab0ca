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
//! written at an explicit `now` (`check_at`, `reserve_at`: replays, tests) has no
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

mod batch;
mod connection;
mod error;
mod fence;
pub mod fleet;
mod lease;
mod lua;
mod path;
mod redlock;
mod watchdog;

use redis::{aio, ConnectionLike, Pipeline, Value};
use tollgate_core::memory::KeyedLimiter;
use tollgate_core::{Decision, Refund, Reserve, Ticks};

pub use connection::{client, connect_async, Reconnecting, ReconnectingAsync, DEFAULT_TIMEOUT};
pub use error::Error;
pub use fence::FencedResource;
pub use lease::RedisLeases;
pub use lua::{
    library_name, LuaAlgorithm, MAX_LUA_HORIZON, MAX_LUA_LIMIT, MAX_LUA_LOG_LIMIT, MAX_LUA_TICKS,
};
pub use path::Path;
pub use redlock::{Redlock, RedlockGrant};
pub use watchdog::{AsyncLeaseGuard, LeaseGuard};

use path::{Invocation, Program};

/// What a limiter answers when Redis cannot be reached (see [`RedisLimiter::decide`]).
#[derive(Debug)]
pub enum FailPolicy<A: tollgate_core::Algorithm> {
    /// Deny: protect the service behind the limit at the cost of its callers.
    Closed,
    /// Admit: keep serving at the cost of the limit.
    Open,
    /// Decide with a limiter in this process: each replica enforces the limit alone, so
    /// a fleet of `n` admits up to `n` times the limit while Redis is away.
    Local(KeyedLimiter<Vec<u8>, A>),
}

/// A decision under a [`FailPolicy`], saying where it came from.
#[derive(Debug)]
pub enum Outcome {
    /// Redis decided.
    Redis(Decision),
    /// Redis was unreachable; the local limiter decided.
    Local(Decision, Error),
    /// Redis was unreachable; admitted by [`FailPolicy::Open`].
    Open(Error),
    /// Redis was unreachable; denied by [`FailPolicy::Closed`].
    Closed(Error),
}

impl Outcome {
    /// Whether the request may proceed.
    pub fn allowed(&self) -> bool {
        match self {
            Self::Redis(d) | Self::Local(d, _) => d.allowed,
            Self::Open(_) => true,
            Self::Closed(_) => false,
        }
    }
}

/// One script call: what it does, a key, a cost, and optionally the time and the
/// longest wait.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Call<'a> {
    mode: Mode,
    key: &'a [u8],
    cost: u64,
    now: Option<Ticks>,
    max_wait: Option<Ticks>,
}

/// What a script call does (its first argument; see `lua/main.lua`).
#[derive(Debug, Clone, Copy)]
enum Mode {
    /// Decide a request and store the new state.
    Decide,
    /// Return the keys' values, refusing keys of other types.
    Read,
    /// Delete the keys if each is absent or a valid state, else refuse.
    Reset,
    /// Delete the keys holding a valid state.
    Purge,
    /// Take up to `cost` units (fleets).
    Take,
    /// Give `cost` units back before a deadline (fleets).
    Refund,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Self::Decide => "decide",
            Self::Read => "read",
            Self::Reset => "reset",
            Self::Purge => "purge",
            Self::Take => "take",
            Self::Refund => "refund",
        }
    }
}

/// How many keys [`RedisLimiter::purge`] asks `SCAN` for, and checks in one script call.
pub const PURGE_BATCH: usize = 500;

/// The reply of a `read`: each key's value or nothing.
fn values(reply: Value) -> Result<Vec<Option<Vec<u8>>>, Error> {
    redis::from_redis_value(reply).map_err(|_| Error::Reply)
}

/// A `WRONGTYPE` error about `key` as [`Error::Foreign`], naming the type `TYPE` `found`;
/// the error as it came if the key holds a string or nothing by then.
fn foreign(key: &[u8], error: redis::RedisError, found: Result<String, Error>) -> Error {
    match found {
        Ok(found) if found != "string" && found != "none" => Error::Foreign {
            key: key.to_vec(),
            found,
        },
        Ok(_) => Error::Redis(error),
        Err(e) => e,
    }
}

fn corrupt(key: &[u8], reason: String) -> Error {
    Error::Corrupt {
        key: key.to_vec(),
        reason,
    }
}

/// A rate limiter whose state lives in Redis, shared by every process using the same
/// keys, prefix and algorithm.
#[derive(Debug)]
pub struct RedisLimiter<A: LuaAlgorithm> {
    algorithm: A,
    /// The script, its place in the library, and the path calls take.
    program: Program,
    prefix: Vec<u8>,
    on_unavailable: FailPolicy<A>,
    /// How many arguments a decision on the general path takes (see `lua/library.lua`'s
    /// `batch`).
    decide_args: usize,
}

impl<A: LuaAlgorithm> RedisLimiter<A> {
    /// A limiter for `algorithm`, failing closed; an error if its parameters are outside
    /// the range the scripts compute exactly.
    pub fn new(algorithm: A) -> Result<Self, Error> {
        algorithm.lua_range()?;
        let mut params = redis::Cmd::new();
        algorithm.lua_args(0, &mut params);
        // The mode, time, cost and wait, then the algorithm's.
        let decide_args = 4 + params.args_iter().len();
        Ok(Self {
            decide_args,
            program: Program::new(lua::script(&algorithm)),
            algorithm,
            prefix: Vec::new(),
            on_unavailable: FailPolicy::Closed,
        })
    }

    /// Puts `prefix` before every key.
    pub fn with_prefix(mut self, prefix: impl Into<Vec<u8>>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// What [`RedisLimiter::decide`] answers when Redis cannot be reached.
    pub fn on_unavailable(mut self, policy: FailPolicy<A>) -> Self {
        self.on_unavailable = policy;
        self
    }

    /// Calls take `path` instead of the fastest one the server offers. With
    /// [`Path::Module`] on a server without the module, calls fail (`unknown command`).
    /// Never an error today; the `Result` leaves room for paths a build cannot take.
    pub fn with_path(mut self, path: Path) -> Result<Self, Error> {
        self.program.force(Some(path));
        Ok(self)
    }

    /// The path calls take: the one chosen with [`RedisLimiter::with_path`], else the
    /// fastest the server offered on the first call ([`Path::Module`] when the module
    /// is loaded, else [`Path::Functions`] on Redis ≥ 7 unless `FUNCTION` is refused,
    /// else [`Path::Scripts`]); `None` before that call.
    pub fn path(&self) -> Option<Path> {
        self.program.path()
    }

    /// The algorithm.
    pub fn algorithm(&self) -> &A {
        &self.algorithm
    }

    /// The script every decision runs on [`Path::Scripts`] (for inspection, or
    /// `SCRIPT LOAD` ahead of time).
    pub fn script(&self) -> &str {
        self.program.source()
    }

    /// The Redis keys holding `key`'s state: one, or one per composite member.
    pub fn redis_keys(&self, key: &[u8]) -> Result<Vec<Vec<u8>>, Error> {
        let members = self.algorithm.lua_keys();
        if members == 1 {
            return Ok(vec![[&self.prefix[..], key].concat()]);
        }
        // An empty hash tag would hash each member's whole name, scattering them.
        if key.is_empty() {
            return Err(Error::EmptyKey);
        }
        Ok((0..members)
            .map(|i| [&self.prefix[..], b"{", key, b"}:", i.to_string().as_bytes()].concat())
            .collect())
    }

    /// Decides a request of `cost` on `key` at the server's time.
    pub fn check<C: ConnectionLike>(
        &self,
        con: &mut C,
        key: &[u8],
        cost: u64,
    ) -> Result<Decision, Error> {
        self.one(con, Call::new(key, cost, None))
    }

    /// Decides at an explicit time `now` (replay, tests) instead of the server's. The
    /// state written has no expiry (see the crate's docs: clean up with
    /// [`RedisLimiter::purge`]).
    pub fn check_at<C: ConnectionLike>(
        &self,
        con: &mut C,
        key: &[u8],
        cost: u64,
        now: Ticks,
    ) -> Result<Decision, Error> {
        self.one(con, Call::new(key, cost, Some(now)))
    }

    /// Like [`RedisLimiter::check`], applying the [`FailPolicy`] when Redis cannot be
    /// reached; other errors (a corrupt state, bad input) are returned.
    pub fn decide<C: ConnectionLike>(
        &self,
        con: &mut C,
        key: &[u8],
        cost: u64,
    ) -> Result<Outcome, Error> {
        self.apply_policy(key, cost, self.check(con, key, cost))
    }

    /// Decides many requests in one round trip (one connection, so one node: on Redis
    /// Cluster use [`RedisLimiter::check_batch_async`]), in order, each exactly as its
    /// own [`RedisLimiter::check`] would, a key repeated seeing the state its earlier
    /// request left. On [`Path::Module`] and [`Path::Functions`] one command decides
    /// them all (`TOLLGATE.BATCH`, the library's `batch`); on [`Path::Scripts`], and
    /// before the first call has detected the path, a pipeline of one call each. The
    /// outer error is the connection's; each request has its own result.
    pub fn check_batch<C: ConnectionLike>(
        &self,
        con: &mut C,
        requests: &[(&[u8], u64)],
    ) -> Result<Vec<Result<Decision, Error>>, Error> {
        self.check_batch_call(con, requests, None)
    }

    /// [`RedisLimiter::check_batch`] at an explicit time `now` (replays, tests).
    pub fn check_batch_at<C: ConnectionLike>(
        &self,
        con: &mut C,
        requests: &[(&[u8], u64)],
        now: Ticks,
    ) -> Result<Vec<Result<Decision, Error>>, Error> {
        self.check_batch_call(con, requests, Some(now))
    }

    fn check_batch_call<C: ConnectionLike>(
        &self,
        con: &mut C,
        requests: &[(&[u8], u64)],
        now: Option<Ticks>,
    ) -> Result<Vec<Result<Decision, Error>>, Error> {
        let calls: Vec<_> = requests
            .iter()
            .map(|&(key, cost)| Call::new(key, cost, now))
            .collect();
        self.run(con, &calls)
    }

    /// Asynchronous [`RedisLimiter::check`], on a multiplexed connection, a connection
    /// manager or a cluster connection.
    pub async fn check_async<C: aio::ConnectionLike>(
        &self,
        con: &mut C,
        key: &[u8],
        cost: u64,
    ) -> Result<Decision, Error> {
        self.one_async(con, Call::new(key, cost, None)).await
    }

    /// Asynchronous [`RedisLimiter::check_at`].
    pub async fn check_at_async<C: aio::ConnectionLike>(
        &self,
        con: &mut C,
        key: &[u8],
        cost: u64,
        now: Ticks,
    ) -> Result<Decision, Error> {
        self.one_async(con, Call::new(key, cost, Some(now))).await
    }

    /// Asynchronous [`RedisLimiter::decide`].
    pub async fn decide_async<C: aio::ConnectionLike>(
        &self,
        con: &mut C,
        key: &[u8],
        cost: u64,
    ) -> Result<Outcome, Error> {
        let result = self.check_async(con, key, cost).await;
        self.apply_policy(key, cost, result)
    }

    /// Decides many requests at once: in one command where the path has one (the
    /// module's or the library's, see [`RedisLimiter::check_batch`]), else each its own
    /// call, all sent before any reply is read (a multiplexed connection pipelines
    /// them), each routed by its own key on a cluster (where a batch's keys span slots,
    /// the server refuses it once and calls go one by one from then on).
    pub async fn check_batch_async<C: aio::ConnectionLike + Clone>(
        &self,
        con: &C,
        requests: &[(&[u8], u64)],
    ) -> Vec<Result<Decision, Error>> {
        let calls: Vec<_> = requests
            .iter()
            .map(|&(key, cost)| Call::new(key, cost, None))
            .collect();
        let mut results = Vec::with_capacity(calls.len());
        for chunk in calls.chunks(self.batch_size()) {
            results.extend(self.run_batch_async(con, chunk).await);
        }
        results
    }

    /// Asynchronous [`RedisLimiter::run_batch`]: one by one where the path has no
    /// command for a batch, or the server refused it, or the connection failed.
    async fn run_batch_async<C: aio::ConnectionLike + Clone>(
        &self,
        con: &C,
        calls: &[Call<'_>],
    ) -> Vec<Result<Decision, Error>> {
        let mut own = con.clone();
        // A failure to ask leaves the path unknown: the calls go one by one.
        let _ = self.program.detect_async(&mut own).await;
        if let Some(mut batch) = self.batch(calls) {
            let reply = match &batch.command {
                batch::Command::Module(cmd) => cmd.query_async(&mut own).await,
                batch::Command::Library(invocation) => {
                    self.program.query_async(&mut own, invocation).await
                }
            };
            match reply {
                Ok(reply) => {
                    self.answers(calls, &mut batch, &reply);
                    let mut results = Vec::with_capacity(calls.len());
                    for (result, call) in batch.results.into_iter().zip(calls) {
                        results.push(self.explained_async(&mut own, call.key, result).await);
                    }
                    return results;
                }
                Err(e) => self.program.batch_refused(&e),
            }
        }
        let calls = calls.iter().map(|&call| {
            let mut con = con.clone();
            async move { self.one_async(&mut con, call).await }
        });
        futures_util::future::join_all(calls).await
    }

    /// The state stored for `key`, decoded by the core; `None` when fresh. A key holding
    /// anything but a state of this algorithm is an error ([`Error::Foreign`],
    /// [`Error::Corrupt`]), never "fresh".
    pub fn state<C: ConnectionLike>(
        &self,
        con: &mut C,
        key: &[u8],
    ) -> Result<Option<A::State>, Error> {
        let values = self.read(con, key)?;
        self.algorithm
            .lua_decode(&values)
            .map_err(|e| corrupt(key, e.to_string()))
    }

    /// Forgets `key`: its next request finds a fresh state. Atomically refuses, deleting
    /// nothing, if a key holds anything but a valid state of this algorithm.
    pub fn reset<C: ConnectionLike>(&self, con: &mut C, key: &[u8]) -> Result<(), Error> {
        let result = self.query(con, &Call::mode(key, Mode::Reset), &self.redis_keys(key)?);
        self.explained(con, key, result.map(drop))
    }

    /// Deletes every state of this algorithm under the limiter's prefix (any member's,
    /// for a composite) and returns how many keys went; keys holding anything else stay.
    /// States written at explicit times never expire (see [`RedisLimiter::check_at`]):
    /// this is their clean-up. The keyspace is scanned in batches of [`PURGE_BATCH`],
    /// each checked and deleted by one script call, so the server is never blocked for
    /// long. One server: on a cluster, run it against each primary.
    pub fn purge<C: ConnectionLike>(&self, con: &mut C) -> Result<u64, Error> {
        let mut pattern = Vec::with_capacity(self.prefix.len() + 1);
        for &b in &self.prefix {
            if matches!(b, b'*' | b'?' | b'[' | b']' | b'\\') {
                pattern.push(b'\\');
            }
            pattern.push(b);
        }
        pattern.push(b'*');
        let (mut cursor, mut deleted) = (0u64, 0);
        loop {
            let (next, keys): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(PURGE_BATCH)
                .query(con)
                .map_err(|e| Error::from_redis(e, &self.prefix))?;
            if !keys.is_empty() {
                let reply = self.query(con, &Call::mode(&self.prefix, Mode::Purge), &keys)?;
                deleted += redis::from_redis_value::<u64>(reply).map_err(|_| Error::Reply)?;
            }
            if next == 0 {
                return Ok(deleted);
            }
            cursor = next;
        }
    }

    fn apply_policy(
        &self,
        key: &[u8],
        cost: u64,
        result: Result<Decision, Error>,
    ) -> Result<Outcome, Error> {
        match result {
            Ok(decision) => Ok(Outcome::Redis(decision)),
            Err(error @ Error::Unavailable(_)) => Ok(match &self.on_unavailable {
                FailPolicy::Closed => Outcome::Closed(error),
                FailPolicy::Open => Outcome::Open(error),
                FailPolicy::Local(local) => Outcome::Local(local.check(key, cost), error),
            }),
            Err(error) => Err(error),
        }
    }

    /// The invocation for `call` on `keys`, path aside.
    fn command(&self, call: &Call, keys: &[Vec<u8>]) -> Result<Invocation, Error> {
        let args = self.arguments(call)?;
        let (function, read_only) = match args.fast {
            Some(_) => ("bucket", false),
            None => (call.mode.name(), matches!(call.mode, Mode::Read)),
        };
        let mut invocation = self.program.invocation(function, read_only, keys);
        self.append_lua(call, &args, &mut invocation.cmd);
        if matches!(call.mode, Mode::Decide) && self.program.may_use_module() {
            let mut module = redis::cmd("TOLLGATE.CHECK");
            module.arg(keys.len()).arg(keys);
            self.algorithm.module_args(&mut module);
            module.arg("COST").arg(args.cost);
            if let Some(now) = call.now {
                module.arg("NOW").arg(now);
            }
            if let Some(max_wait) = args.max_wait {
                module.arg("MAXWAIT").arg(max_wait);
            }
            invocation.module = Some(module);
        }
        Ok(invocation)
    }

    /// `call`'s cost, wait and fast argument as every path sends them; an error if its
    /// time is beyond the scripts' range.
    fn arguments(&self, call: &Call) -> Result<Arguments, Error> {
        if let Some(now) = call.now.filter(|&now| now > MAX_LUA_TICKS) {
            return Err(Error::OutOfRange {
                what: "now",
                value: now,
                max: MAX_LUA_TICKS,
            });
        }
        // Every cost above the cap decides and stores like the cap.
        let cost = call.cost.min(self.algorithm.lua_cost_cap());
        // Any wait beyond 2^53 ticks admits the same requests as an unbounded one.
        let max_wait = call.max_wait.map(|w| w.min(2 * MAX_LUA_TICKS));
        let fast = match call.mode {
            Mode::Decide => self.algorithm.lua_fast_arg(cost, call.now, max_wait),
            _ => None,
        };
        Ok(Arguments {
            cost,
            max_wait,
            fast,
        })
    }

    /// Appends `call`'s arguments for the library or a script, after its keys (see
    /// `lua/main.lua`): the fast path's one argument, or the mode, time, cost, wait and
    /// the algorithm.
    fn append_lua(&self, call: &Call, args: &Arguments, cmd: &mut redis::Cmd) {
        if let Some(arg) = &args.fast {
            cmd.arg(arg);
            return;
        }
        cmd.arg(call.mode.name())
            .arg(Arg(call.now))
            .arg(args.cost)
            .arg(Arg(args.max_wait));
        // A take's or refund's cost varies in the script: it scales it there.
        let scaled = if matches!(call.mode, Mode::Take | Mode::Refund) {
            0
        } else {
            args.cost
        };
        self.algorithm.lua_args(scaled, cmd);
    }

    /// Runs `call` on `keys` on the path in use, loading the library or the script if
    /// the server lacks it.
    fn query<C: ConnectionLike>(
        &self,
        con: &mut C,
        call: &Call,
        keys: &[Vec<u8>],
    ) -> Result<Value, Error> {
        let invocation = self.command(call, keys)?;
        self.program
            .query(con, &invocation)
            .map_err(|e| Error::from_redis(e, call.key))
    }

    /// The values of `key`'s Redis keys (`None`: absent), refusing other types.
    fn read<C: ConnectionLike>(
        &self,
        con: &mut C,
        key: &[u8],
    ) -> Result<Vec<Option<Vec<u8>>>, Error> {
        values(self.query(con, &Call::mode(key, Mode::Read), &self.redis_keys(key)?)?)
    }

    /// Replaces a script's report of a corrupt state by the core decoder's verdict on
    /// the same bytes, so every call (and every host) words it the same way.
    fn explained<C: ConnectionLike, T>(
        &self,
        con: &mut C,
        key: &[u8],
        result: Result<T, Error>,
    ) -> Result<T, Error> {
        match result {
            Err(Error::Corrupt { reason, .. }) => Err(match self.read(con, key) {
                Ok(values) => self.diagnose(key, &values, reason),
                Err(e) => e,
            }),
            Err(Error::Redis(error)) if error.code() == Some("WRONGTYPE") => {
                let found = self
                    .type_query(key)
                    .and_then(|cmd| cmd.query(con).map_err(|e| Error::from_redis(e, key)));
                Err(foreign(key, error, found))
            }
            result => result,
        }
    }

    /// `TYPE` of `key`'s Redis key, asked after a fast call's `GET` met a value of
    /// another type (`WRONGTYPE`), to name it.
    fn type_query(&self, key: &[u8]) -> Result<redis::Cmd, Error> {
        let keys = self.redis_keys(key)?;
        Ok(redis::cmd("TYPE").arg(&keys[0]).to_owned())
    }

    /// The decision a script's `reply` to `call` stands for: the fast path's one integer
    /// (see [`LuaAlgorithm::lua_fast_decision`]) or the general path's fields.
    fn parse(&self, reply: Value, call: &Call) -> Result<Decision, Error> {
        let Value::Int(relative) = reply else {
            return parse(reply, call.key);
        };
        let cost = call.cost.min(self.algorithm.lua_cost_cap());
        u64::try_from(relative)
            .ok()
            .and_then(|r| self.algorithm.lua_fast_decision(r, cost, call.max_wait))
            .ok_or(Error::Reply)
    }

    /// The core's reason why `values` are no state of this algorithm; if the core reads
    /// them, they are beyond the scripts' range, as the script said.
    fn diagnose(&self, key: &[u8], values: &[Option<Vec<u8>>], script: String) -> Error {
        match self.algorithm.lua_decode(values) {
            Err(e) => corrupt(key, e.to_string()),
            Ok(_) => corrupt(key, format!("beyond the Redis scripts' range ({script})")),
        }
    }

    fn one<C: ConnectionLike>(&self, con: &mut C, call: Call) -> Result<Decision, Error> {
        let keys = self.redis_keys(call.key)?;
        let result = self
            .query(con, &call, &keys)
            .and_then(|reply| self.parse(reply, &call));
        self.explained(con, call.key, result)
    }

    /// Decides `calls` in one command per [`RedisLimiter::batch_size`] where the path
    /// has one, else in one pipeline.
    fn run<C: ConnectionLike>(
        &self,
        con: &mut C,
        calls: &[Call],
    ) -> Result<Vec<Result<Decision, Error>>, Error> {
        // The module is asked about before the first command is built.
        self.program
            .detect(con)
            .map_err(|e| Error::from_redis(e, b""))?;
        let mut results = Vec::with_capacity(calls.len());
        for chunk in calls.chunks(self.batch_size()) {
            results.extend(self.run_batch(con, chunk)?);
        }
        Ok(results)
    }

    /// Decides `calls` in one command, or in a pipeline where the path has none or the
    /// server refused it.
    fn run_batch<C: ConnectionLike>(
        &self,
        con: &mut C,
        calls: &[Call],
    ) -> Result<Vec<Result<Decision, Error>>, Error> {
        let Some(mut batch) = self.batch(calls) else {
            return self.pipeline(con, calls);
        };
        let reply = match &batch.command {
            batch::Command::Module(cmd) => cmd.query(con),
            batch::Command::Library(invocation) => self.program.query(con, invocation),
        };
        match reply {
            Ok(reply) => self.answers(calls, &mut batch, &reply),
            Err(e) if e.code().is_some() => {
                self.program.batch_refused(&e);
                return self.pipeline(con, calls);
            }
            Err(e) => return Err(Error::from_redis(e, b"")),
        }
        Ok(batch
            .results
            .into_iter()
            .zip(calls)
            .map(|(result, call)| self.explained(con, call.key, result))
            .collect())
    }

    /// Sends `calls` in one pipeline; calls the server had no script or library for go
    /// again alone, which loads it.
    fn pipeline<C: ConnectionLike>(
        &self,
        con: &mut C,
        calls: &[Call],
    ) -> Result<Vec<Result<Decision, Error>>, Error> {
        let mut results = Vec::with_capacity(calls.len());
        let mut pipe = Pipeline::with_capacity(calls.len());
        let mut sent = Vec::new();
        for (i, call) in calls.iter().enumerate() {
            match self
                .redis_keys(call.key)
                .and_then(|keys| self.command(call, &keys))
            {
                Ok(invocation) => {
                    pipe.add_command(invocation.module.unwrap_or(invocation.cmd));
                    sent.push(i);
                    results.push(Err(Error::Reply));
                }
                Err(e) => results.push(Err(e)),
            }
        }
        if sent.is_empty() {
            return Ok(results);
        }
        let replies: Vec<Value> = pipe
            .ignore_errors()
            .query(con)
            .map_err(|e| Error::from_redis(e, b""))?;
        for (&i, reply) in sent.iter().zip(replies) {
            results[i] = if self.program.must_retry(&reply) {
                self.one(con, calls[i])
            } else {
                let result = self.parse(reply, &calls[i]);
                self.explained(con, calls[i].key, result)
            };
        }
        Ok(results)
    }

    async fn query_async<C: aio::ConnectionLike>(
        &self,
        con: &mut C,
        call: &Call<'_>,
    ) -> Result<Value, Error> {
        let invocation = self.command(call, &self.redis_keys(call.key)?)?;
        self.program
            .query_async(con, &invocation)
            .await
            .map_err(|e| Error::from_redis(e, call.key))
    }

    async fn one_async<C: aio::ConnectionLike>(
        &self,
        con: &mut C,
        call: Call<'_>,
    ) -> Result<Decision, Error> {
        let result = self
            .query_async(con, &call)
            .await
            .and_then(|reply| self.parse(reply, &call));
        self.explained_async(con, call.key, result).await
    }

    /// Asynchronous [`RedisLimiter::explained`].
    async fn explained_async<C: aio::ConnectionLike, T>(
        &self,
        con: &mut C,
        key: &[u8],
        result: Result<T, Error>,
    ) -> Result<T, Error> {
        let reason = match result {
            Err(Error::Corrupt { reason, .. }) => reason,
            Err(Error::Redis(error)) if error.code() == Some("WRONGTYPE") => {
                let cmd = self.type_query(key)?;
                let found = cmd
                    .query_async(con)
                    .await
                    .map_err(|e| Error::from_redis(e, key));
                return Err(foreign(key, error, found));
            }
            result => return result,
        };
        let read = self.query_async(con, &Call::mode(key, Mode::Read)).await;
        Err(match read.and_then(values) {
            Ok(values) => self.diagnose(key, &values, reason),
            Err(e) => e,
        })
    }
}

impl<A: LuaAlgorithm + Reserve> RedisLimiter<A> {
    /// Reserves `cost` if it can act within `max_wait` ticks: admitted with the `delay`
    /// to wait before acting, or denied with the exact retry.
    pub fn reserve<C: ConnectionLike>(
        &self,
        con: &mut C,
        key: &[u8],
        cost: u64,
        max_wait: Ticks,
    ) -> Result<Decision, Error> {
        self.one(con, Call::new(key, cost, None).waiting(max_wait))
    }

    /// [`RedisLimiter::reserve`] at an explicit time `now`.
    pub fn reserve_at<C: ConnectionLike>(
        &self,
        con: &mut C,
        key: &[u8],
        cost: u64,
        max_wait: Ticks,
        now: Ticks,
    ) -> Result<Decision, Error> {
        self.one(con, Call::new(key, cost, Some(now)).waiting(max_wait))
    }

    /// Asynchronous [`RedisLimiter::reserve`].
    pub async fn reserve_async<C: aio::ConnectionLike>(
        &self,
        con: &mut C,
        key: &[u8],
        cost: u64,
        max_wait: Ticks,
    ) -> Result<Decision, Error> {
        let call = Call::new(key, cost, None).waiting(max_wait);
        self.one_async(con, call).await
    }
}

/// What [`RedisLimiter::take`] got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taken {
    /// The units taken: as many as were admissible, at most the maximum asked.
    pub units: u64,
    /// The decision for those units (for none: for a cost of zero).
    pub decision: Decision,
    /// The server's time of the call (or the explicit one).
    pub now: Ticks,
    /// The key's state afterwards, in the core's encoding; `None` when fresh.
    pub state: Option<Vec<u8>>,
}

impl<A: LuaAlgorithm + Refund> RedisLimiter<A> {
    /// Takes up to `max` units of `key`'s limit in one atomic call: as many as are
    /// admissible now (the core's [`Refund::take`]). A fleet node spends them locally.
    pub fn take<C: ConnectionLike>(
        &self,
        con: &mut C,
        key: &[u8],
        max: u64,
    ) -> Result<Taken, Error> {
        self.take_call(con, Call::of(Mode::Take, key, max, None))
    }

    /// [`RedisLimiter::take`] at an explicit time `now`.
    pub fn take_at<C: ConnectionLike>(
        &self,
        con: &mut C,
        key: &[u8],
        max: u64,
        now: Ticks,
    ) -> Result<Taken, Error> {
        self.take_call(con, Call::of(Mode::Take, key, max, Some(now)))
    }

    /// Gives back `units` taken and not used (the core's [`Refund::refund`]), unless the
    /// server's time has reached `deadline` (the end of the window they were counted in:
    /// a late give-back is dropped, never applied to a later window). Returns the
    /// decision a cost of zero gets afterwards.
    pub fn refund<C: ConnectionLike>(
        &self,
        con: &mut C,
        key: &[u8],
        units: u64,
        deadline: Option<Ticks>,
    ) -> Result<Decision, Error> {
        let call = Call::of(Mode::Refund, key, units, None);
        self.one(
            con,
            Call {
                max_wait: deadline,
                ..call
            },
        )
    }

    /// [`RedisLimiter::refund`] at an explicit time `now`, without a deadline.
    pub fn refund_at<C: ConnectionLike>(
        &self,
        con: &mut C,
        key: &[u8],
        units: u64,
        now: Ticks,
    ) -> Result<Decision, Error> {
        self.one(con, Call::of(Mode::Refund, key, units, Some(now)))
    }

    pub(crate) fn take_call<C: ConnectionLike>(
        &self,
        con: &mut C,
        call: Call,
    ) -> Result<Taken, Error> {
        let result = self
            .query(con, &call, &self.redis_keys(call.key)?)
            .and_then(|reply| parse_take(reply, call.key));
        self.explained(con, call.key, result)
    }
}

impl<A: LuaAlgorithm + Refund + Reserve> RedisLimiter<A> {
    /// Charges `units` already admitted elsewhere (a fleet's batch settle) in one atomic
    /// call: booked at once as a reservation with no bound on its wait (the core's
    /// [`Reserve::reserve`] with `Ticks::MAX`), so a bucket may go into debt, which
    /// every node then sees; only a charge above the bucket's capacity is refused
    /// (`units` 0).
    pub fn charge<C: ConnectionLike>(
        &self,
        con: &mut C,
        key: &[u8],
        units: u64,
    ) -> Result<Taken, Error> {
        self.take_call(
            con,
            Call::of(Mode::Take, key, units, None).waiting(Ticks::MAX),
        )
    }

    /// [`RedisLimiter::charge`] at an explicit time `now`.
    pub fn charge_at<C: ConnectionLike>(
        &self,
        con: &mut C,
        key: &[u8],
        units: u64,
        now: Ticks,
    ) -> Result<Taken, Error> {
        self.take_call(
            con,
            Call::of(Mode::Take, key, units, Some(now)).waiting(Ticks::MAX),
        )
    }
}

/// A take's reply: the decision's seven fields, the units taken, the state or nil.
fn parse_take(reply: Value, key: &[u8]) -> Result<Taken, Error> {
    if let Value::ServerError(e) = reply {
        return Err(Error::from_redis(e.into(), key));
    }
    let Value::Array(mut fields) = reply else {
        return Err(Error::Reply);
    };
    if fields.len() != 9 {
        return Err(Error::Reply);
    }
    let state = match fields.pop() {
        Some(Value::BulkString(bytes)) => Some(bytes),
        Some(Value::Nil | Value::Boolean(false)) => None,
        _ => return Err(Error::Reply),
    };
    let units: u64 = fields
        .pop()
        .and_then(|v| redis::from_redis_value(v).ok())
        .ok_or(Error::Reply)?;
    let now: u64 = redis::from_redis_value(fields[6].clone()).map_err(|_| Error::Reply)?;
    let decision = parse(Value::Array(fields), key)?;
    Ok(Taken {
        units,
        decision,
        now,
        state,
    })
}

impl<'a> Call<'a> {
    fn of(mode: Mode, key: &'a [u8], cost: u64, now: Option<Ticks>) -> Self {
        Self {
            mode,
            ..Self::new(key, cost, now)
        }
    }

    fn new(key: &'a [u8], cost: u64, now: Option<Ticks>) -> Self {
        Self {
            mode: Mode::Decide,
            key,
            cost,
            now,
            max_wait: None,
        }
    }

    /// A call that decides nothing: cost 0 at the server's time.
    fn mode(key: &'a [u8], mode: Mode) -> Self {
        Self {
            mode,
            ..Self::new(key, 0, None)
        }
    }

    fn waiting(self, max_wait: Ticks) -> Self {
        Self {
            max_wait: Some(max_wait),
            ..self
        }
    }
}

/// A call's arguments as every path sends them (see [`RedisLimiter::arguments`]).
#[derive(Debug)]
struct Arguments {
    /// The cost, clamped to the algorithm's cap.
    cost: u64,
    /// The longest wait, clamped to what the scripts compute.
    max_wait: Option<Ticks>,
    /// The fast path's one argument, when the call takes it.
    fast: Option<Vec<u8>>,
}

/// An optional script argument: empty when absent.
struct Arg(Option<u64>);

impl redis::ToRedisArgs for Arg {
    fn write_redis_args<W: ?Sized + redis::RedisWrite>(&self, out: &mut W) {
        match self.0 {
            Some(value) => value.write_redis_args(out),
            None => out.write_arg(b""),
        }
    }
}

impl redis::ToSingleRedisArg for Arg {}

/// The script's reply: allowed, limit, remaining, retry (-1: never), reset, delay, now.
fn parse(reply: Value, key: &[u8]) -> Result<Decision, Error> {
    if let Value::ServerError(e) = reply {
        return Err(Error::from_redis(e.into(), key));
    }
    let fields: Vec<i64> = redis::from_redis_value(reply).map_err(|_| Error::Reply)?;
    let &[allowed, limit, remaining, retry, reset, delay, _now] = &fields[..] else {
        return Err(Error::Reply);
    };
    decision([allowed, limit, remaining, retry, reset, delay])
}

/// The decision a reply's first six fields stand for: allowed, limit, remaining, retry
/// (-1: never), reset, delay.
fn decision(fields: [i64; 6]) -> Result<Decision, Error> {
    let [allowed, limit, remaining, retry, reset, delay] = fields;
    let unsigned = |v: i64| u64::try_from(v).map_err(|_| Error::Reply);
    let (limit, remaining, reset) = (unsigned(limit)?, unsigned(remaining)?, unsigned(reset)?);
    Ok(if allowed == 1 {
        Decision::admit(limit, remaining, reset, unsigned(delay)?)
    } else {
        let retry = if retry < 0 {
            None
        } else {
            Some(unsigned(retry)?)
        };
        Decision::deny(limit, remaining, retry, reset)
    })
}
