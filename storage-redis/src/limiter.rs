//! The limiter: its state in Redis, each decision one call. Each operation is one
//! `async fn` over a [`Link`]; its synchronous and asynchronous methods differ only in
//! the link they give it.

use redis::{aio, ConnectionLike, ToRedisArgs, Value};
use sluicegate_core::{
    Decision, Refund, Report, ReportRequest, Reported, Request, Reserve, Ticks, SECOND,
};

use crate::call::{Call, Mode};
use crate::error::Error;
use crate::fail::{self, FailPolicy, Outcome};
use crate::key::RedisKey;
use crate::link::{block, typed, Awaiting, Blocking, Link};
use crate::lua::{self, LuaAlgorithm};
use crate::reply::{self, Explain, Taken};
use crate::route::{Program, Route};

/// How many keys [`RedisLimiter::purge`] asks `SCAN` for, and checks in one script call.
pub const PURGE_BATCH: usize = 500;

/// A rate limiter whose state lives in Redis, shared by every process using the same
/// keys, prefix and algorithm.
#[derive(Debug)]
pub struct RedisLimiter<A: LuaAlgorithm> {
    pub(crate) algorithm: A,
    /// The script, its place in the library, and the route calls take.
    pub(crate) program: Program,
    pub(crate) prefix: Vec<u8>,
    /// What [`RedisLimiter::decide`] answers when Redis cannot be reached.
    pub(crate) on_unavailable: FailPolicy<A>,
    /// How many arguments a decision on the general path takes (see `lua/library.lua`'s
    /// `batch`).
    pub(crate) decide_args: usize,
}

impl<A: LuaAlgorithm> RedisLimiter<A> {
    /// A limiter for `algorithm`; an error if its parameters are outside the range the
    /// scripts compute exactly. When Redis cannot be reached, [`RedisLimiter::decide`]
    /// returns the error, the core's default [`FailPolicy`] (see
    /// [`RedisLimiter::on_unavailable`]).
    pub fn new(algorithm: A) -> Result<Self, Error> {
        algorithm.lua_range()?;
        let mut params = redis::Cmd::new();
        algorithm.lua_args(0, 0, &mut params);
        // The mode, time, cost and wait, then the algorithm's.
        let decide_args = 4 + params.args_iter().len();
        Ok(Self {
            decide_args,
            program: Program::new(lua::script(&algorithm)),
            algorithm,
            prefix: Vec::new(),
            on_unavailable: FailPolicy::default(),
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

    /// Calls take `route` instead of the fastest one the server offers. With
    /// [`Route::Module`] on a server without the module, calls fail (`unknown command`).
    /// Never an error today; the `Result` leaves room for routes a build cannot take.
    pub fn with_route(mut self, route: Route) -> Result<Self, Error> {
        self.program.force(Some(route));
        Ok(self)
    }

    /// The route calls take: the one chosen with [`RedisLimiter::with_route`], else the
    /// fastest the server offered on the first call ([`Route::Module`] when the module
    /// is loaded, else [`Route::Functions`] on Redis ≥ 7 unless `FUNCTION` is refused,
    /// else [`Route::Scripts`]); `None` before that call.
    pub fn route(&self) -> Option<Route> {
        self.program.route()
    }

    /// The algorithm.
    pub fn algorithm(&self) -> &A {
        &self.algorithm
    }

    /// The script every decision runs on [`Route::Scripts`] (for inspection, or
    /// `SCRIPT LOAD` ahead of time).
    pub fn script(&self) -> &str {
        self.program.source()
    }

    /// The Redis keys holding `key`'s state: one, or one per composite member.
    pub fn redis_keys(&self, key: &[u8]) -> Result<Vec<Vec<u8>>, Error> {
        Ok(self.keys(key)?.map(RedisKey::to_vec).collect())
    }

    /// The Redis keys of `key`, written into commands as they are.
    pub(crate) fn keys<'a>(
        &'a self,
        key: &'a [u8],
    ) -> Result<impl Iterator<Item = RedisKey<'a>> + 'a, Error> {
        RedisKey::all(&self.prefix, key, self.algorithm.lua_keys())
    }

    /// Decides a request of `cost` on `key` at the server's time.
    pub fn check<C: ConnectionLike>(
        &self,
        con: &mut C,
        key: &[u8],
        cost: u64,
    ) -> Result<Decision, Error> {
        self.check_request(con, &Request::new(key).cost(cost))
    }

    /// Decides `request`: at its own `now` if it has one (replays, tests; the state then
    /// written has no expiry, see the crate's docs: clean up with
    /// [`RedisLimiter::purge`]), else at the server's time (as [`RedisLimiter::check`]).
    pub fn check_request<C: ConnectionLike>(
        &self,
        con: &mut C,
        request: &Request<'_>,
    ) -> Result<Decision, Error> {
        self.blocking(con, Call::request(request), reply::decision)
    }

    /// What `request` would get, changing nothing: the scripts only decide, so this
    /// reads the stored state and lets the core answer with the same math. Without its
    /// own `now`, at the server's `TIME` (one more round trip). A time beyond the
    /// scripts' range is [`Error::OutOfRange`], as for a check.
    pub fn peek<C: ConnectionLike>(
        &self,
        con: &mut C,
        request: &Request<'_>,
    ) -> Result<Decision, Error> {
        block(self.peek_on(&mut Blocking(con), request))
    }

    /// Asynchronous [`RedisLimiter::peek`].
    pub async fn peek_async<C: aio::ConnectionLike>(
        &self,
        con: &mut C,
        request: &Request<'_>,
    ) -> Result<Decision, Error> {
        self.peek_on(&mut Awaiting(con), request).await
    }

    /// [`RedisLimiter::peek`] over `link`.
    async fn peek_on<L: Link>(
        &self,
        link: &mut L,
        request: &Request<'_>,
    ) -> Result<Decision, Error> {
        let now = match request.now {
            Some(now) => now,
            None => server_time(typed(link.send(&redis::cmd("TIME")).await), request.key)?,
        };
        self.algorithm.lua_now_range(now)?;
        let state = self.state_on(link, request.key).await?;
        Ok(self.algorithm.peek(state, now, request.cost))
    }

    /// Like [`RedisLimiter::check`], applying the [`FailPolicy`] when Redis cannot be
    /// reached; other errors (a corrupt state, bad input) are returned.
    pub fn decide<C: ConnectionLike>(
        &self,
        con: &mut C,
        key: &[u8],
        cost: u64,
    ) -> Result<Outcome, Error> {
        fail::apply(&self.on_unavailable, key, cost, self.check(con, key, cost))
    }

    /// Decides many requests in one round trip (one connection, so one node: on Redis
    /// Cluster use [`RedisLimiter::check_batch_async`]), in order, each exactly as its
    /// own [`RedisLimiter::check`] would, a key repeated seeing the state its earlier
    /// request left. On [`Route::Module`] and [`Route::Functions`] one command decides
    /// them all (`SLUICEGATE.BATCH`, the library's `batch`); on [`Route::Scripts`], and
    /// before the first call has detected the route, a pipeline of one call each. The
    /// outer error is the connection's; each request has its own result.
    ///
    /// Requests with their own `now` are decided at it; a batch whose requests carry
    /// different times goes as one call each.
    pub fn check_batch<C: ConnectionLike>(
        &self,
        con: &mut C,
        requests: &[Request<'_>],
    ) -> Result<Vec<Result<Decision, Error>>, Error> {
        self.run(con, &Call::batch(requests))
    }

    /// Asynchronous [`RedisLimiter::check`], on a multiplexed connection, a connection
    /// manager or a cluster connection.
    pub async fn check_async<C: aio::ConnectionLike>(
        &self,
        con: &mut C,
        key: &[u8],
        cost: u64,
    ) -> Result<Decision, Error> {
        self.check_request_async(con, &Request::new(key).cost(cost))
            .await
    }

    /// Asynchronous [`RedisLimiter::check_request`].
    pub async fn check_request_async<C: aio::ConnectionLike>(
        &self,
        con: &mut C,
        request: &Request<'_>,
    ) -> Result<Decision, Error> {
        self.awaiting(con, Call::request(request), reply::decision)
            .await
    }

    /// Asynchronous [`RedisLimiter::decide`].
    pub async fn decide_async<C: aio::ConnectionLike>(
        &self,
        con: &mut C,
        key: &[u8],
        cost: u64,
    ) -> Result<Outcome, Error> {
        let result = self.check_async(con, key, cost).await;
        fail::apply(&self.on_unavailable, key, cost, result)
    }

    /// Decides many requests at once: in one command where the route has one (the
    /// module's or the library's, see [`RedisLimiter::check_batch`]), else each its own
    /// call, all sent before any reply is read (a multiplexed connection pipelines
    /// them), each routed by its own key on a cluster (where a batch's keys span slots,
    /// the server refuses it once and calls go one by one from then on).
    pub async fn check_batch_async<C: aio::ConnectionLike + Clone>(
        &self,
        con: &C,
        requests: &[Request<'_>],
    ) -> Vec<Result<Decision, Error>> {
        self.run_async(con, &Call::batch(requests)).await
    }

    /// The state stored for `key`, decoded by the core; `None` when fresh. A key holding
    /// anything but a state of this algorithm is an error ([`Error::Foreign`],
    /// [`Error::Corrupt`]), never "fresh".
    pub fn state<C: ConnectionLike>(
        &self,
        con: &mut C,
        key: &[u8],
    ) -> Result<Option<A::State>, Error> {
        block(self.state_on(&mut Blocking(con), key))
    }

    /// [`RedisLimiter::state`] over `link`.
    async fn state_on<L: Link>(&self, link: &mut L, key: &[u8]) -> Result<Option<A::State>, Error> {
        let values = self.read(link, key).await?;
        self.algorithm
            .lua_decode(&values)
            .map_err(|e| reply::corrupt(key, e.to_string()))
    }

    /// Forgets `key`: its next request finds a fresh state. Atomically refuses, deleting
    /// nothing, if a key holds anything but a valid state of this algorithm.
    pub fn reset<C: ConnectionLike>(&self, con: &mut C, key: &[u8]) -> Result<(), Error> {
        self.blocking(con, Call::mode(key, Mode::Reset), |_, _, _| Ok(()))
    }

    /// Asynchronous [`RedisLimiter::reset`].
    pub async fn reset_async<C: aio::ConnectionLike>(
        &self,
        con: &mut C,
        key: &[u8],
    ) -> Result<(), Error> {
        let call = Call::mode(key, Mode::Reset);
        self.awaiting(con, call, |_, _, _| Ok(())).await
    }

    /// Deletes every state of this algorithm under the limiter's prefix (any member's,
    /// for a composite) and returns how many keys went; keys holding anything else stay.
    /// States written at explicit times never expire (see the crate's docs):
    /// this is their clean-up. The keyspace is scanned in batches of [`PURGE_BATCH`],
    /// each checked and deleted by one script call, so the server is never blocked for
    /// long. One server: on a cluster, run it against each primary.
    pub fn purge<C: ConnectionLike>(&self, con: &mut C) -> Result<u64, Error> {
        block(self.purge_on(&mut Blocking(con)))
    }

    /// [`RedisLimiter::purge`] over `link`.
    async fn purge_on<L: Link>(&self, link: &mut L) -> Result<u64, Error> {
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
            let mut scan = redis::cmd("SCAN");
            scan.arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(PURGE_BATCH);
            let (next, keys): (u64, Vec<Vec<u8>>) =
                typed(link.send(&scan).await).map_err(|e| Error::from_redis(e, &self.prefix))?;
            if !keys.is_empty() {
                let call = Call::mode(&self.prefix, Mode::Purge);
                let reply = self.query(link, &call, &keys).await?;
                deleted += redis::from_redis_value::<u64>(reply).map_err(|_| Error::Reply)?;
            }
            if next == 0 {
                return Ok(deleted);
            }
            cursor = next;
        }
    }

    /// Runs `call` on `keys` on the route in use, loading the library or the script if
    /// the server lacks it; once more in the server's calendar period if it refused
    /// the one this machine's clock gave (see [`Call::retry`]).
    pub(crate) async fn query<L: Link, K: ToRedisArgs>(
        &self,
        link: &mut L,
        call: &Call<'_>,
        keys: &[K],
    ) -> Result<Value, Error> {
        let result = self.query_once(link, call, keys).await;
        match call.retry(&result) {
            Some(again) => self.query_once(link, &again, keys).await,
            None => result,
        }
    }

    /// One try of [`RedisLimiter::query`].
    async fn query_once<L: Link, K: ToRedisArgs>(
        &self,
        link: &mut L,
        call: &Call<'_>,
        keys: &[K],
    ) -> Result<Value, Error> {
        let invocation = call.invocation(&self.algorithm, &self.program, keys)?;
        self.program
            .query(link, &invocation)
            .await
            .map_err(|e| Error::from_redis(e, call.key))
    }

    /// Runs `call` on its key's Redis keys and reads the reply with `parse` (see
    /// [`reply`]), its errors about the state explained.
    pub(crate) async fn one<L: Link, T>(
        &self,
        link: &mut L,
        call: Call<'_>,
        parse: impl FnOnce(&A, Value, &Call) -> Result<T, Error>,
    ) -> Result<T, Error> {
        let keys: Vec<RedisKey> = self.keys(call.key)?.collect();
        let result = self
            .query(link, &call, &keys)
            .await
            .and_then(|reply| parse(&self.algorithm, reply, &call));
        match result {
            Err(error) => Err(self.explained(link, call.key, error).await),
            result => result,
        }
    }

    /// [`RedisLimiter::one`] on a synchronous connection.
    pub(crate) fn blocking<C: ConnectionLike, T>(
        &self,
        con: &mut C,
        call: Call<'_>,
        parse: impl FnOnce(&A, Value, &Call) -> Result<T, Error>,
    ) -> Result<T, Error> {
        block(self.one(&mut Blocking(con), call, parse))
    }

    /// [`RedisLimiter::one`] on an asynchronous connection.
    pub(crate) async fn awaiting<C: aio::ConnectionLike, T>(
        &self,
        con: &mut C,
        call: Call<'_>,
        parse: impl FnOnce(&A, Value, &Call) -> Result<T, Error>,
    ) -> Result<T, Error> {
        self.one(&mut Awaiting(con), call, parse).await
    }

    /// The values of `key`'s Redis keys (`None`: absent), refusing other types.
    async fn read<L: Link>(&self, link: &mut L, key: &[u8]) -> Result<Vec<Option<Vec<u8>>>, Error> {
        let keys: Vec<RedisKey> = self.keys(key)?.collect();
        reply::values(
            self.query(link, &Call::mode(key, Mode::Read), &keys)
                .await?,
        )
    }

    /// Replaces a script's report of a corrupt state by the core decoder's verdict on
    /// the same bytes, so every call (and every host) words it the same way; names what
    /// a key of another type holds.
    pub(crate) async fn explained<L: Link>(&self, link: &mut L, key: &[u8], error: Error) -> Error {
        match self.explain(key, error) {
            Explain::Done(error) => error,
            Explain::Type(cmd, error) => reply::foreign(key, error, typed(link.send(&cmd).await)),
            Explain::Read(reason) => self.diagnose(key, self.read(link, key).await, reason),
        }
    }

    /// What explaining `error` about `key` takes (see [`Explain`]): for a `WRONGTYPE`,
    /// `TYPE` of its (first) Redis key.
    fn explain(&self, key: &[u8], error: Error) -> Explain {
        match error {
            Error::Corrupt { reason, .. } => Explain::Read(reason),
            Error::Redis(error) if error.code() == Some("WRONGTYPE") => match self.keys(key) {
                Ok(mut keys) => {
                    Explain::Type(redis::cmd("TYPE").arg(keys.next()).to_owned(), error)
                }
                Err(e) => Explain::Done(e),
            },
            error => Explain::Done(error),
        }
    }

    /// The core's reason why `key`'s values, as `read`, are no state of this algorithm;
    /// if the core reads them, they are beyond the scripts' range, as the `script` said.
    fn diagnose(
        &self,
        key: &[u8],
        read: Result<Vec<Option<Vec<u8>>>, Error>,
        script: String,
    ) -> Error {
        match read.map(|values| self.algorithm.lua_decode(&values)) {
            Ok(Err(e)) => reply::corrupt(key, e.to_string()),
            Ok(Ok(_)) => reply::corrupt(key, format!("beyond the Redis scripts' range ({script})")),
            Err(e) => e,
        }
    }
}

impl<A: LuaAlgorithm + Reserve> RedisLimiter<A> {
    /// Reserves for `request` if it can act within `max_wait` ticks (at its own `now` if
    /// it has one, else at the server's time): admitted with the `delay` to wait before
    /// acting, or denied with the exact retry.
    pub fn reserve<C: ConnectionLike>(
        &self,
        con: &mut C,
        request: &Request<'_>,
        max_wait: Ticks,
    ) -> Result<Decision, Error> {
        self.blocking(con, reserve_call(request, max_wait), reply::decision)
    }

    /// Asynchronous [`RedisLimiter::reserve`].
    pub async fn reserve_async<C: aio::ConnectionLike>(
        &self,
        con: &mut C,
        request: &Request<'_>,
        max_wait: Ticks,
    ) -> Result<Decision, Error> {
        let call = reserve_call(request, max_wait);
        self.awaiting(con, call, reply::decision).await
    }
}

/// The call reserving for `request` within `max_wait`.
fn reserve_call<'a>(request: &Request<'a>, max_wait: Ticks) -> Call<'a> {
    Call::request(request).waiting(Some(max_wait))
}

impl<A: LuaAlgorithm + Report> RedisLimiter<A> {
    /// Adds `request.adjustment` units to what its key has taken (negative: gives them
    /// back) in one atomic call, at its own `now` if it has one, else at the server's
    /// time: the core's [`Report::report`], with the units recorded and dropped and the
    /// key's standing after it.
    pub fn report<C: ConnectionLike>(
        &self,
        con: &mut C,
        request: &ReportRequest<'_>,
    ) -> Result<Reported, Error> {
        self.blocking(con, report_call(request), reply::reported)
    }

    /// Asynchronous [`RedisLimiter::report`].
    pub async fn report_async<C: aio::ConnectionLike>(
        &self,
        con: &mut C,
        request: &ReportRequest<'_>,
    ) -> Result<Reported, Error> {
        self.awaiting(con, report_call(request), reply::reported)
            .await
    }
}

/// The call reporting `request`.
fn report_call<'a>(request: &ReportRequest<'a>) -> Call<'a> {
    let mode = Mode::Report(request.adjustment);
    Call::of(mode, request.key, 0, request.now)
}

impl<A: LuaAlgorithm + Refund> RedisLimiter<A> {
    /// Takes up to `request.cost` units of its key's limit in one atomic call: as many
    /// as are admissible at its time (the core's [`Refund::take`]). A fleet node spends
    /// them locally.
    pub fn take<C: ConnectionLike>(
        &self,
        con: &mut C,
        request: &Request<'_>,
    ) -> Result<Taken, Error> {
        self.settle(con, request, false)
    }

    /// Gives back `request.cost` units taken and not used (the core's
    /// [`Refund::refund`]), unless the request's time has reached `deadline` (the end
    /// of the window they were counted in: a late give-back is dropped, never applied
    /// to a later window). Returns the decision a cost of zero gets afterwards.
    pub fn refund<C: ConnectionLike>(
        &self,
        con: &mut C,
        request: &Request<'_>,
        deadline: Option<Ticks>,
    ) -> Result<Decision, Error> {
        let call = Call::request(request)
            .mode_of(Mode::Refund)
            .waiting(deadline);
        self.blocking(con, call, reply::decision)
    }

    /// A fleet's settle of `request.cost` units: a take, or `charged`, a charge (see
    /// [`RedisLimiter::charge`]).
    pub(crate) fn settle<C: ConnectionLike>(
        &self,
        con: &mut C,
        request: &Request<'_>,
        charged: bool,
    ) -> Result<Taken, Error> {
        let call = Call::request(request).mode_of(Mode::Take);
        let call = call.waiting(charged.then_some(Ticks::MAX));
        self.blocking(con, call, |_, reply, call| reply::taken(reply, call.key))
    }
}

impl<A: LuaAlgorithm + Refund + Reserve> RedisLimiter<A> {
    /// Charges `request.cost` units already admitted elsewhere (a fleet's batch settle)
    /// in one atomic call: booked at once as a reservation with no bound on its wait
    /// (the core's [`Reserve::reserve`] with `Ticks::MAX`), so a bucket may go into
    /// debt, which every node then sees; only a charge above the bucket's capacity is
    /// refused (`units` 0).
    pub fn charge<C: ConnectionLike>(
        &self,
        con: &mut C,
        request: &Request<'_>,
    ) -> Result<Taken, Error> {
        self.settle(con, request, true)
    }
}

/// The server's `TIME` reply, in microseconds as the scripts read it.
fn server_time(reply: redis::RedisResult<(u64, u64)>, key: &[u8]) -> Result<Ticks, Error> {
    let (seconds, micros) = reply.map_err(|e| Error::from_redis(e, key))?;
    Ok(seconds.saturating_mul(SECOND).saturating_add(micros))
}
