//! Many decisions of one limiter in one command: the module's `SLUICEGATE.BATCH` or the
//! library's `batch` function, each deciding the requests in order, each exactly as its
//! own call would. One command instead of a pipeline of one per request: the client
//! builds one command and parses one flat array of integers, and the server runs one
//! command, not one per decision.
//!
//! The reply is one bulk string of records, one per request (one string, where an
//! array of integers costs the client's parser far more per element): `0` and the fast
//! route's integer (see [`LuaAlgorithm::lua_fast_decision`]); or `1` and the decision's
//! first six fields (as a single call replies them); or `2`, the length of the error's
//! text and the text, which fails that request alone. Integers are big-endian, signed,
//! eight bytes; the length four.

use redis::{aio, Cmd, ConnectionLike, Pipeline, RedisError, RedisWrite, Value};
use sluicegate_core::Decision;

use crate::call::Call;
use crate::error::Error;
use crate::key::RedisKey;
use crate::limiter::RedisLimiter;
use crate::link::{block, Awaiting, Blocking, Link};
use crate::lua::LuaAlgorithm;
use crate::reply;
use crate::route::{Invocation, Program, Route};

/// The most keys one batch command carries (the module's bound too): longer batches go
/// in several commands.
pub(crate) const BATCH_KEYS: usize = 4096;

/// A request's result, before errors about its state are explained (see
/// `RedisLimiter::explained`).
pub(crate) type Answer = Result<Decision, Error>;

/// One command deciding many calls.
struct Batch {
    command: Command,
    /// Each call's result: the error of a call that could not be sent, else a
    /// placeholder its answer replaces.
    results: Vec<Answer>,
    /// The calls sent, in the command's order.
    sent: Vec<usize>,
}

/// The command, on the route that has one.
enum Command {
    /// `SLUICEGATE.BATCH`.
    Module(Cmd),
    /// `FCALL` of the library's `batch`, loaded if the server lacks it.
    Library(Invocation),
}

impl<A: LuaAlgorithm> RedisLimiter<A> {
    /// How many calls one batch command carries.
    fn batch_size(&self) -> usize {
        (BATCH_KEYS / self.algorithm.lua_keys()).max(1)
    }

    /// The command deciding `calls` (decisions, at most [`Self::batch_size`]) at once;
    /// `None` where the route in use has none: scripts, a route not detected yet, or a
    /// server that refused a batch (a cluster, where its keys span slots).
    fn batch(&self, calls: &[Call]) -> Option<Batch> {
        let route = self.program.batch_route()?;
        let members = self.algorithm.lua_keys();
        let mut results = Vec::with_capacity(calls.len());
        let mut sent = Vec::with_capacity(calls.len());
        let mut arguments = Vec::with_capacity(calls.len());
        let mut keys: Vec<RedisKey> = Vec::with_capacity(calls.len() * members);
        for (i, call) in calls.iter().enumerate() {
            let checked =
                (self.keys(call.key)).and_then(|its| Ok((its, call.arguments(&self.algorithm)?)));
            match checked {
                Ok((its, args)) => {
                    keys.extend(its);
                    sent.push(i);
                    arguments.push(args);
                    results.push(Err(Error::Reply));
                }
                Err(e) => results.push(Err(e)),
            }
        }
        if sent.is_empty() {
            return None;
        }
        // One time for the whole command: requests at different times go one by one.
        let now = calls[sent[0]].now;
        if sent.iter().any(|&i| calls[i].now != now) {
            return None;
        }
        let command = if route == Route::Module {
            let mut cmd = redis::cmd("SLUICEGATE.BATCH");
            cmd.arg(keys.len()).arg(&keys[..]);
            // One period for all: the calls share one clock (see `Call::batch`).
            self.algorithm.module_args(arguments[0].at, &mut cmd);
            cmd.arg("COSTS");
            for args in &arguments {
                cmd.arg(args.cost);
            }
            if let Some(now) = now {
                cmd.arg("NOW").arg(now);
            }
            Command::Module(cmd)
        } else {
            let mut invocation = self.program.invocation("batch", false, &keys);
            invocation.cmd.arg(members).arg(self.decide_args);
            // Room for the arguments at once, not grown by doubling: the fast path's one,
            // or a general call's (about as long).
            let sizes = arguments
                .iter()
                .map(|a| a.fast.as_ref().map_or(64, Vec::len));
            invocation.cmd.reserve_space_for_args(sizes);
            for (&i, args) in sent.iter().zip(&arguments) {
                calls[i].append_lua(&self.algorithm, args, &mut invocation.cmd);
            }
            Command::Library(invocation)
        };
        Some(Batch {
            command,
            results,
            sent,
        })
    }

    /// Fills `batch`'s results from the command's `reply`; a reply of another shape
    /// fails every call sent (from the first record it cannot read).
    fn answers(&self, calls: &[Call], batch: &mut Batch, reply: &Value) {
        let Value::BulkString(bytes) = reply else {
            return;
        };
        let mut records = Records(bytes);
        for &i in &batch.sent {
            let answer = match records.byte() {
                Some(0) => records.integer().ok_or(Error::Reply).and_then(|relative| {
                    reply::decision(&self.algorithm, Value::Int(relative), &calls[i])
                }),
                Some(1) => records
                    .fields()
                    .ok_or(Error::Reply)
                    .and_then(reply::from_fields),
                Some(2) => Err(records
                    .text()
                    .map_or(Error::Reply, |text| failure(text, calls[i].key))),
                _ => return,
            };
            batch.results[i] = answer;
        }
    }
}

impl<A: LuaAlgorithm> RedisLimiter<A> {
    /// Decides `calls` in one command per [`RedisLimiter::batch_size`] where the route
    /// has one, else in one pipeline.
    pub(crate) fn run<C: ConnectionLike>(
        &self,
        con: &mut C,
        calls: &[Call],
    ) -> Result<Vec<Answer>, Error> {
        // The module is asked about before the first command is built.
        block(self.program.detect(&mut Blocking(&mut *con)))
            .map_err(|e| Error::from_redis(e, b""))?;
        let mut results = Vec::with_capacity(calls.len());
        for chunk in calls.chunks(self.batch_size()) {
            results.extend(self.run_batch(con, chunk)?);
        }
        Ok(results)
    }

    /// Asynchronous [`RedisLimiter::run`]: chunk by chunk, each chunk's calls one by one
    /// where the route has no command for a batch, or the server refused it, or the
    /// connection failed.
    pub(crate) async fn run_async<C: aio::ConnectionLike + Clone>(
        &self,
        con: &C,
        calls: &[Call<'_>],
    ) -> Vec<Answer> {
        let mut results = Vec::with_capacity(calls.len());
        for chunk in calls.chunks(self.batch_size()) {
            results.extend(self.run_batch_async(con, chunk).await);
        }
        results
    }

    /// Decides `calls` in one command, or in a pipeline where the route has none or the
    /// server refused it.
    fn run_batch<C: ConnectionLike>(
        &self,
        con: &mut C,
        calls: &[Call],
    ) -> Result<Vec<Answer>, Error> {
        match block(self.one_command(&mut Blocking(&mut *con), calls)) {
            Some(Ok(results)) => Ok(results),
            Some(Err(e)) if e.code().is_none() => Err(Error::from_redis(e, b"")),
            _ => self.pipeline(con, calls),
        }
    }

    /// Asynchronous [`RedisLimiter::run_batch`], where the calls go one by one instead
    /// of a pipeline (a multiplexed connection pipelines them), and after any failure.
    async fn run_batch_async<C: aio::ConnectionLike + Clone>(
        &self,
        con: &C,
        calls: &[Call<'_>],
    ) -> Vec<Answer> {
        let mut own = con.clone();
        let link = &mut Awaiting(&mut own);
        // A failure to ask leaves the route unknown: the calls go one by one.
        let _ = self.program.detect(link).await;
        if let Some(Ok(results)) = self.one_command(link, calls).await {
            return results;
        }
        let calls = calls.iter().map(|&call| {
            let mut con = con.clone();
            async move { self.awaiting(&mut con, call, reply::decision).await }
        });
        futures_util::future::join_all(calls).await
    }

    /// Decides `calls` in one command over `link`, each answer explained; `None` where
    /// the route has no such command, the command's error where it failed (noting a
    /// refusal: see [`Program::batch_refused`]).
    async fn one_command<L: Link>(
        &self,
        link: &mut L,
        calls: &[Call<'_>],
    ) -> Option<redis::RedisResult<Vec<Answer>>> {
        let mut batch = self.batch(calls)?;
        let reply = match batch.command.send(&self.program, link).await {
            Ok(reply) => reply,
            Err(e) => {
                self.program.batch_refused(&e);
                return Some(Err(e));
            }
        };
        self.answers(calls, &mut batch, &reply);
        let mut results = Vec::with_capacity(calls.len());
        for (result, call) in batch.results.into_iter().zip(calls) {
            results.push(match result {
                Err(error) => self.answered(link, call, error).await,
                decided => decided,
            });
        }
        Some(Ok(results))
    }

    /// Sends `calls` in one pipeline; calls the server had no script or library for go
    /// again alone, which loads it.
    fn pipeline<C: ConnectionLike>(
        &self,
        con: &mut C,
        calls: &[Call],
    ) -> Result<Vec<Answer>, Error> {
        let mut results = Vec::with_capacity(calls.len());
        let mut pipe = Pipeline::with_capacity(calls.len());
        let mut sent = Vec::new();
        for (i, call) in calls.iter().enumerate() {
            let keys = self.keys(call.key).map(Iterator::collect::<Vec<_>>);
            match keys.and_then(|keys| call.invocation(&self.algorithm, &self.program, &keys)) {
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
        let mut link = Blocking(con);
        for (&i, reply) in sent.iter().zip(replies) {
            results[i] = if self.program.must_retry(&reply) {
                block(self.one(&mut link, calls[i], reply::decision))
            } else {
                match reply::decision(&self.algorithm, reply, &calls[i]) {
                    Err(error) => block(self.answered(&mut link, &calls[i], error)),
                    decided => decided,
                }
            };
        }
        Ok(results)
    }

    /// A batch's `error` for `call`, explained; a call the server refused as out of its
    /// calendar period (nothing changed) goes again alone, after the batch, in the
    /// period holding the server's time (see [`Call::retry`]).
    async fn answered<L: Link>(&self, link: &mut L, call: &Call<'_>, error: Error) -> Answer {
        let failed = Err(error);
        if let Some(again) = call.retry(&failed) {
            return self.one(link, again, reply::decision).await;
        }
        match failed {
            Err(error) => Err(self.explained(link, call.key, error).await),
            decided => decided,
        }
    }
}

impl Command {
    /// Sends the command on `link`, loading the library if the server lacks it.
    async fn send<L: Link>(&self, program: &Program, link: &mut L) -> redis::RedisResult<Value> {
        match self {
            Self::Module(cmd) => link.send(cmd).await,
            Self::Library(invocation) => program.query(link, invocation).await,
        }
    }
}

/// A batch's reply, read front to back.
struct Records<'a>(&'a [u8]);

impl<'a> Records<'a> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.0.split_first_chunk::<N>()?;
        self.0 = rest;
        Some(*head)
    }

    fn byte(&mut self) -> Option<u8> {
        self.take::<1>().map(|[b]| b)
    }

    fn integer(&mut self) -> Option<i64> {
        self.take::<8>().map(i64::from_be_bytes)
    }

    fn fields(&mut self) -> Option<[i64; 6]> {
        let mut fields = [0; 6];
        for field in &mut fields {
            *field = self.integer()?;
        }
        Some(fields)
    }

    fn text(&mut self) -> Option<&'a [u8]> {
        let len = usize::try_from(u32::from_be_bytes(self.take::<4>()?)).ok()?;
        let (text, rest) = self.0.split_at_checked(len)?;
        self.0 = rest;
        Some(text)
    }
}

/// A request's error, from its text in the reply, classified as the same error replied
/// to a call alone would be.
fn failure(text: &[u8], key: &[u8]) -> Error {
    // An error reply is one line.
    let mut line = Vec::with_capacity(text.len() + 3);
    line.push(b'-');
    line.extend(
        text.iter()
            .map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
    );
    line.extend_from_slice(b"\r\n");
    match redis::parse_redis_value(&line) {
        Ok(Value::ServerError(e)) => Error::from_redis(RedisError::from(e), key),
        _ => Error::Reply,
    }
}
