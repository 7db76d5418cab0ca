//! Script replies read into decisions, takes and states, and errors about a key's state
//! worded as every host words them.

use redis::Value;
use sluicegate_core::{Decision, Reported, Ticks};

use crate::call::{Call, Mode};
use crate::error::Error;
use crate::lua::LuaAlgorithm;

/// What [`RedisLimiter::take`](crate::RedisLimiter::take) got.
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

/// The decision `algorithm`'s script `reply` to `call` stands for: the fast path's one
/// integer (see [`LuaAlgorithm::lua_fast_decision`]) or the general path's fields.
pub(crate) fn decision<A: LuaAlgorithm>(
    algorithm: &A,
    reply: Value,
    call: &Call,
) -> Result<Decision, Error> {
    let Value::Int(relative) = reply else {
        return fields(reply, call.key);
    };
    u64::try_from(relative)
        .ok()
        .and_then(|r| algorithm.lua_fast_decision(r, call.fast_ask(algorithm)))
        .ok_or(Error::Reply)
}

/// A take's reply: the decision's seven fields, the units taken, the state or nil.
pub(crate) fn taken(reply: Value, key: &[u8]) -> Result<Taken, Error> {
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
    let decision = self::fields(Value::Array(fields), key)?;
    Ok(Taken {
        units,
        decision,
        now,
        state,
    })
}

/// A report's reply: the decision's seven fields, then the units recorded of the call's
/// adjustment (the caller's, before any clamping).
pub(crate) fn reported<A>(_: &A, reply: Value, call: &Call) -> Result<Reported, Error> {
    if let Value::ServerError(e) = reply {
        return Err(Error::from_redis(e.into(), call.key));
    }
    let Mode::Report(adjustment) = call.mode else {
        return Err(Error::Reply);
    };
    let fields: Vec<i64> = redis::from_redis_value(reply).map_err(|_| Error::Reply)?;
    let &[allowed, limit, remaining, retry, reset, delay, _now, recorded] = &fields[..] else {
        return Err(Error::Reply);
    };
    let decision = from_fields([allowed, limit, remaining, retry, reset, delay])?;
    let recorded = u64::try_from(recorded).map_err(|_| Error::Reply)?;
    Ok(Reported::new(adjustment, recorded, decision))
}

/// The script's reply: allowed, limit, remaining, retry (-1: never), reset, delay, now.
fn fields(reply: Value, key: &[u8]) -> Result<Decision, Error> {
    if let Value::ServerError(e) = reply {
        return Err(Error::from_redis(e.into(), key));
    }
    let fields: Vec<i64> = redis::from_redis_value(reply).map_err(|_| Error::Reply)?;
    let &[allowed, limit, remaining, retry, reset, delay, _now] = &fields[..] else {
        return Err(Error::Reply);
    };
    from_fields([allowed, limit, remaining, retry, reset, delay])
}

/// The decision a reply's first six fields stand for: allowed, limit, remaining, retry
/// (-1: never), reset, delay.
pub(crate) fn from_fields(fields: [i64; 6]) -> Result<Decision, Error> {
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

/// The reply of a `read`: each key's value or nothing.
pub(crate) fn values(reply: Value) -> Result<Vec<Option<Vec<u8>>>, Error> {
    redis::from_redis_value(reply).map_err(|_| Error::Reply)
}

/// What an error about a key's state needs before it is returned: the key's `TYPE`
/// (a `WRONGTYPE` reply, to name what the key holds), its values (a script's report of a
/// corrupt state, to word it as the core's decoder does), or nothing.
pub(crate) enum Explain {
    /// The error as it stands.
    Done(Error),
    /// Send this `TYPE` command, then see [`foreign`].
    Type(redis::Cmd, redis::RedisError),
    /// Read the key's values and decode them; the script's reason.
    Read(String),
}

/// A `WRONGTYPE` error about `key` as [`Error::Foreign`], naming the type `TYPE` `found`;
/// the error as it came if the key holds a string or nothing by then.
pub(crate) fn foreign(
    key: &[u8],
    error: redis::RedisError,
    found: redis::RedisResult<String>,
) -> Error {
    match found {
        Ok(found) if found != "string" && found != "none" => Error::Foreign {
            key: key.to_vec(),
            found,
        },
        Ok(_) => Error::Redis(error),
        Err(e) => Error::from_redis(e, key),
    }
}

pub(crate) fn corrupt(key: &[u8], reason: String) -> Error {
    Error::Corrupt {
        key: key.to_vec(),
        reason,
    }
}
