//! tollgate's core compiled into Redis: `redis-server --loadmodule
//! libtollgate_redis_module.so`.
//!
//! Commands (times and durations in microseconds, the core's ticks):
//!
//! ```text
//! TOLLGATE.CHECK numkeys key [key ...] algorithm [algorithm ...] [COST c] [NOW t] [MAXWAIT w]
//! TOLLGATE.PEEK  numkeys key [key ...] algorithm [algorithm ...] [COST c] [NOW t]
//! TOLLGATE.RESET numkeys key [key ...] algorithm [algorithm ...]
//! TOLLGATE.LEASE.ACQUIRE key max owner ttl [NOW t]
//! TOLLGATE.LEASE.RELEASE key max owner [NOW t]
//! TOLLGATE.LEASE.RENEW   key max owner ttl [NOW t]
//! CL.THROTTLE key max_burst count period [quantity]
//! ```
//!
//! An algorithm is written as the scripts name it: `fixed_window limit period
//! [counting_denied]`, `sliding_log limit period`, `sliding_counter limit period`,
//! `token_bucket capacity rate period`, `leaky_bucket capacity rate period`, `pacing
//! capacity rate period`, `ban threshold window duration <algorithm>`. Several keys make
//! a composite, one algorithm per key in order (the scripts' layout is `prefix{key}:i`).
//!
//! Every decision reads and writes the core's canonical bytes, the scripts' bytes, with
//! the scripts' rules: the server's clock (`TIME`'s, the wall clock in microseconds)
//! unless `NOW` is given; a state written at the server's time expires when fresh (TTL =
//! `reset_after` rounded up to a millisecond), one written at an explicit time never; a
//! fresh state is deleted; a key of another type or bytes no state encodes are refused
//! (`TOLLGATE foreign <type>`, `TOLLGATE corrupt state: <the core decoder's reason>`),
//! changing nothing.
//!
//! Replication: a command replicates its effects (`SET key bytes PXAT t`, `SET key
//! bytes`, `DEL key`), never itself, so replicas and the AOF never decide again at
//! their own time.

#![deny(missing_docs)]
// Unit tests run without a server: the commands are registered only in the real build.
#![cfg_attr(test, allow(dead_code))]

mod args;
mod cell;
mod engine;
mod spec;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis_module::key::RedisKeyWritable;
use redis_module::{Context, KeyType, RedisError, RedisResult, RedisString, RedisValue};
use tollgate_core::Ticks;

use args::Args;
use engine::{keys, Failure, LeaseOp, LeaseRequest, Request, Write};

/// The server's time in microseconds since the Unix epoch: the wall clock `TIME` reads
/// (the scripts' clock), not Redis's cached command time, which has only milliseconds.
fn server_now() -> Ticks {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(Ticks::MAX))
}

/// The arguments after the command's name, as bytes.
fn byte_args(args: &[RedisString]) -> Vec<&[u8]> {
    args.iter().skip(1).map(RedisString::as_slice).collect()
}

fn error(failure: impl std::fmt::Display) -> RedisError {
    RedisError::String(failure.to_string())
}

fn integers(fields: impl IntoIterator<Item = i64>) -> RedisValue {
    RedisValue::Array(fields.into_iter().map(RedisValue::Integer).collect())
}

/// A key opened for a decision: its name (the command's argument) and handle.
struct Key<'a> {
    name: &'a RedisString,
    handle: RedisKeyWritable,
}

impl<'a> Key<'a> {
    fn open(ctx: &Context, name: &'a RedisString) -> Self {
        let handle = ctx.open_key_writable(name);
        Self { name, handle }
    }

    /// The string held, `None` when absent; another type is refused.
    fn value(&self) -> Result<Option<Vec<u8>>, Failure> {
        string_of(self.handle.key_type(), || {
            self.handle.as_string_dma().map(|dma| dma.to_vec()).ok()
        })
    }

    /// Stores `write` as the scripts do and replicates the effect.
    fn store(
        &self,
        ctx: &Context,
        had: bool,
        write: Write,
        now: Ticks,
        explicit: bool,
    ) -> RedisResult<()> {
        let name = self.name.as_slice();
        match write {
            Some((bytes, reset)) => {
                self.handle.as_string_dma()?.write(&bytes)?;
                if explicit {
                    self.handle.remove_expire()?;
                    ctx.replicate("SET", &[name, &bytes[..]]);
                } else {
                    let ttl = reset.div_ceil(1000).max(1);
                    self.handle.set_expire(Duration::from_millis(ttl))?;
                    // An absolute expiry: a replica or an AOF replay expires the key
                    // when the primary does, whenever it applies the write.
                    let at = (now / 1000).saturating_add(ttl).to_string();
                    ctx.replicate("SET", &[name, &bytes[..], b"PXAT", at.as_bytes()]);
                }
            }
            None if had => {
                self.handle.delete()?;
                ctx.replicate("DEL", &[name]);
            }
            None => {}
        }
        Ok(())
    }
}

/// A key's value if it is a string (read by `read`), `None` if absent, else refused.
fn string_of(
    kind: KeyType,
    read: impl FnOnce() -> Option<Vec<u8>>,
) -> Result<Option<Vec<u8>>, Failure> {
    match kind {
        KeyType::Empty => Ok(None),
        KeyType::String => read().map(Some).ok_or(Failure::Foreign("string")),
        other => Err(Failure::Foreign(type_name(other))),
    }
}

/// The values of `keys`, read without opening them for writing.
fn read_only(ctx: &Context, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>, Failure> {
    keys.iter()
        .map(|k| {
            let key = ctx.open_key(&ctx.create_string(*k));
            string_of(key.key_type(), || {
                key.read().ok().flatten().map(<[u8]>::to_vec)
            })
        })
        .collect()
}

/// The name `TYPE` gives a key of this type.
fn type_name(t: KeyType) -> &'static str {
    match t {
        KeyType::Empty => "none",
        KeyType::String => "string",
        KeyType::List => "list",
        KeyType::Hash => "hash",
        KeyType::Set => "set",
        KeyType::ZSet => "zset",
        KeyType::Module => "module value",
        KeyType::Stream => "stream",
    }
}

/// Answers Redis's question "which arguments are keys" for `numkeys key...` commands
/// (Cluster routing, ACLs); `true` if it was that question.
fn key_positions(ctx: &Context, args: &[RedisString]) -> bool {
    if !ctx.is_keys_position_request() {
        return false;
    }
    let bytes = byte_args(args);
    if let Ok(keys) = keys(&mut Args::new(&bytes)) {
        // Only positions that exist: the numkeys parser read every one of them.
        for i in 0..keys.len() {
            ctx.key_at_pos(i32::try_from(i + 2).unwrap_or(i32::MAX));
        }
    }
    true
}

/// The keys of a `numkeys key...` command, opened by their arguments (from the third).
fn open_keys<'a>(ctx: &Context, args: &'a [RedisString], n: usize) -> Vec<Key<'a>> {
    args.iter()
        .skip(2)
        .take(n)
        .map(|k| Key::open(ctx, k))
        .collect()
}

fn check(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    decide(ctx, args, true)
}

fn peek(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    decide(ctx, args, false)
}

/// `TOLLGATE.CHECK` (`write`) or `TOLLGATE.PEEK` (nothing stored).
fn decide(ctx: &Context, args: Vec<RedisString>, write: bool) -> RedisResult {
    if key_positions(ctx, &args) {
        return Ok(RedisValue::NoReply);
    }
    let bytes = byte_args(&args);
    let request = Request::parse(&bytes, write).map_err(|e| error(Failure::Arg(e)))?;
    let now = request.now.unwrap_or_else(server_now);
    if !write {
        let values = read_only(ctx, &request.keys).map_err(error)?;
        let (decision, _) = request.decide(&values, now).map_err(error)?;
        return Ok(integers(engine::reply(&decision, now)));
    }
    let keys = open_keys(ctx, &args, request.keys.len());
    let values = keys
        .iter()
        .map(Key::value)
        .collect::<Result<Vec<_>, _>>()
        .map_err(error)?;
    let (decision, writes) = request.decide(&values, now).map_err(error)?;
    for ((key, old), new) in keys.iter().zip(&values).zip(writes) {
        key.store(ctx, old.is_some(), new, now, request.now.is_some())?;
    }
    Ok(integers(engine::reply(&decision, now)))
}

/// `TOLLGATE.RESET`: deletes the keys if each is absent or a valid state, else refuses;
/// replies how many keys were deleted.
fn reset(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    if key_positions(ctx, &args) {
        return Ok(RedisValue::NoReply);
    }
    let bytes = byte_args(&args);
    let request = Request::parse(&bytes, false).map_err(|e| error(Failure::Arg(e)))?;
    if request.now.is_some() || request.cost != 1 {
        return Err(error("ERR TOLLGATE.RESET takes no COST or NOW"));
    }
    let keys = open_keys(ctx, &args, request.keys.len());
    let values = keys
        .iter()
        .map(Key::value)
        .collect::<Result<Vec<_>, _>>()
        .map_err(error)?;
    request.validate(&values).map_err(error)?;
    let mut deleted = 0;
    for (key, value) in keys.iter().zip(&values) {
        if value.is_some() {
            key.store(ctx, true, None, 0, true)?;
            deleted += 1;
        }
    }
    Ok(RedisValue::Integer(deleted))
}

/// The first argument after the command's name: the key of the one-key commands (their
/// parsers have already required it).
fn first_key(args: &[RedisString]) -> Result<&RedisString, RedisError> {
    args.get(1).ok_or(RedisError::WrongArity)
}

fn lease(ctx: &Context, args: Vec<RedisString>, op: LeaseOp) -> RedisResult {
    let bytes = byte_args(&args);
    let request = LeaseRequest::parse(&bytes, op).map_err(error)?;
    let now = request.now.unwrap_or_else(server_now);
    let key = Key::open(ctx, first_key(&args)?);
    let value = key.value().map_err(error)?;
    let (reply, write) = request.run(op, value.as_deref(), now).map_err(error)?;
    key.store(ctx, value.is_some(), write, now, request.now.is_some())?;
    Ok(integers(reply.fields(now)))
}

fn lease_acquire(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    lease(ctx, args, LeaseOp::Acquire)
}

fn lease_release(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    lease(ctx, args, LeaseOp::Release)
}

fn lease_renew(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    lease(ctx, args, LeaseOp::Renew)
}

/// `CL.THROTTLE`, as redis-cell's.
fn throttle(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    let bytes = byte_args(&args);
    let throttle = cell::Throttle::parse(&bytes).map_err(RedisError::String)?;
    let now = server_now();
    let key = Key::open(ctx, first_key(&args)?);
    let value = key.value().map_err(error)?;
    let (decision, write) = throttle
        .decide(value.as_deref(), now)
        .map_err(|e| error(Failure::Corrupt(e)))?;
    key.store(ctx, value.is_some(), write, now, false)?;
    Ok(integers(cell::reply(&decision)))
}

/// The module's entry points, which Redis calls by name (left out of unit tests, which
/// run without a server and its allocator).
#[cfg(not(test))]
#[allow(missing_docs)]
mod load {
    use super::{check, lease_acquire, lease_release, lease_renew, peek, reset, throttle};

    redis_module::redis_module! {
        name: "tollgate",
        version: 1,
        allocator: (redis_module::alloc::RedisAlloc, redis_module::alloc::RedisAlloc),
        data_types: [],
        commands: [
            ["tollgate.check", check, "write deny-oom getkeys-api", 2, 2, 1, ""],
            ["tollgate.peek", peek, "readonly getkeys-api", 2, 2, 1, ""],
            ["tollgate.reset", reset, "write getkeys-api", 2, 2, 1, ""],
            ["tollgate.lease.acquire", lease_acquire, "write deny-oom", 1, 1, 1, ""],
            ["tollgate.lease.release", lease_release, "write", 1, 1, 1, ""],
            ["tollgate.lease.renew", lease_renew, "write deny-oom", 1, 1, 1, ""],
            ["cl.throttle", throttle, "write deny-oom", 1, 1, 1, ""],
        ],
    }
}
