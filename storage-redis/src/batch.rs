//! Many decisions of one limiter in one command: the module's `TOLLGATE.BATCH` or the
//! library's `batch` function, each deciding the requests in order, each exactly as its
//! own call would. One command instead of a pipeline of one per request: the client
//! builds one command and parses one flat array of integers, and the server runs one
//! command, not one per decision.
//!
//! The reply is one bulk string of records, one per request (one string, where an
//! array of integers costs the client's parser far more per element): `0` and the fast
//! path's integer (see [`LuaAlgorithm::lua_fast_decision`]); or `1` and the decision's
//! first six fields (as a single call replies them); or `2`, the length of the error's
//! text and the text, which fails that request alone. Integers are big-endian, signed,
//! eight bytes; the length four.

use std::io::Write;

use redis::{Cmd, RedisError, RedisWrite, Value};
use tollgate_core::Decision;

use crate::path::{Invocation, Path};
use crate::{decision, Call, Error, LuaAlgorithm, RedisLimiter};

/// The most keys one batch command carries (the module's bound too): longer batches go
/// in several commands.
pub(crate) const BATCH_KEYS: usize = 4096;

/// A request's result, before errors about its state are explained (see
/// `RedisLimiter::explained`).
pub(crate) type Answer = Result<Decision, Error>;

/// One command deciding many calls.
pub(crate) struct Batch {
    pub(crate) command: Command,
    /// Each call's result: the error of a call that could not be sent, else a
    /// placeholder its answer replaces.
    pub(crate) results: Vec<Answer>,
    /// The calls sent, in the command's order.
    sent: Vec<usize>,
}

/// The command, on the path that has one.
pub(crate) enum Command {
    /// `TOLLGATE.BATCH`.
    Module(Cmd),
    /// `FCALL` of the library's `batch`, loaded if the server lacks it.
    Library(Invocation),
}

/// A Redis key written straight into a command: the prefix and the caller's key, or
/// for a composite's member `i`, `prefix{key}:i` (see [`RedisLimiter::redis_keys`]).
pub(crate) struct RedisKey<'a> {
    prefix: &'a [u8],
    key: &'a [u8],
    member: Option<usize>,
}

impl<'a> RedisKey<'a> {
    /// The prefix, then the caller's key.
    pub(crate) fn new(prefix: &'a [u8], key: &'a [u8]) -> Self {
        Self {
            prefix,
            key,
            member: None,
        }
    }
}

impl redis::ToRedisArgs for RedisKey<'_> {
    fn write_redis_args<W: ?Sized + redis::RedisWrite>(&self, out: &mut W) {
        let mut arg = out.writer_for_next_arg();
        // Writes into the command's buffer, which cannot fail.
        let _ = match self.member {
            None => arg
                .write_all(self.prefix)
                .and_then(|()| arg.write_all(self.key)),
            Some(i) => arg
                .write_all(self.prefix)
                .and_then(|()| arg.write_all(b"{"))
                .and_then(|()| arg.write_all(self.key))
                .and_then(|()| write!(arg, "}}:{i}")),
        };
    }
}

impl redis::ToSingleRedisArg for RedisKey<'_> {}

impl<A: LuaAlgorithm> RedisLimiter<A> {
    /// How many calls one batch command carries.
    pub(crate) fn batch_size(&self) -> usize {
        (BATCH_KEYS / self.algorithm.lua_keys()).max(1)
    }

    /// The command deciding `calls` (decisions, at most [`Self::batch_size`]) at once;
    /// `None` where the path in use has none: scripts, a path not detected yet, or a
    /// server that refused a batch (a cluster, where its keys span slots).
    pub(crate) fn batch(&self, calls: &[Call]) -> Option<Batch> {
        let path = self.program.batch_path()?;
        let members = self.algorithm.lua_keys();
        let mut results = Vec::with_capacity(calls.len());
        let mut sent = Vec::with_capacity(calls.len());
        let mut arguments = Vec::with_capacity(calls.len());
        for (i, call) in calls.iter().enumerate() {
            // An empty hash tag would scatter a composite's members.
            let checked = if members > 1 && call.key.is_empty() {
                Err(Error::EmptyKey)
            } else {
                self.arguments(call)
            };
            match checked {
                Ok(args) => {
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
        let keys: Vec<RedisKey> = sent
            .iter()
            .flat_map(|&i| {
                let key = calls[i].key;
                (0..members).map(move |m| RedisKey {
                    prefix: &self.prefix,
                    key,
                    member: (members > 1).then_some(m),
                })
            })
            .collect();
        let now = calls[sent[0]].now;
        let command = if path == Path::Module {
            let mut cmd = redis::cmd("TOLLGATE.BATCH");
            cmd.arg(keys.len()).arg(&keys[..]);
            self.algorithm.module_args(&mut cmd);
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
                self.append_lua(&calls[i], args, &mut invocation.cmd);
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
    pub(crate) fn answers(&self, calls: &[Call], batch: &mut Batch, reply: &Value) {
        let Value::BulkString(bytes) = reply else {
            return;
        };
        let mut records = Records(bytes);
        for &i in &batch.sent {
            let answer = match records.byte() {
                Some(0) => records
                    .integer()
                    .ok_or(Error::Reply)
                    .and_then(|relative| self.parse(Value::Int(relative), &calls[i])),
                Some(1) => records.fields().ok_or(Error::Reply).and_then(decision),
                Some(2) => Err(records
                    .text()
                    .map_or(Error::Reply, |text| failure(text, calls[i].key))),
                _ => return,
            };
            batch.results[i] = answer;
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
