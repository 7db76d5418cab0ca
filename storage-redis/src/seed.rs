//! A key's state moved out of Redis and in whole, each in one atomic call: what a host
//! needs to carry each key's use to a limiter with new parameters (see
//! `AnyAlgorithm::carry_from`).

use redis::{aio, ConnectionLike, Value};
use sluicegate_core::Ticks;

use crate::call::{Call, Mode};
use crate::error::Error;
use crate::limiter::RedisLimiter;
use crate::lua::LuaAlgorithm;
use crate::reply;

impl<A: LuaAlgorithm> RedisLimiter<A> {
    /// Deletes `key`'s state (every Redis key of it, for a composite) and returns it with
    /// the time of the call, in one atomic call: at `now` if given, else at the server's
    /// time. `None` where it held none. As [`RedisLimiter::reset`], a key holding
    /// anything but a valid state of this algorithm is refused, nothing deleted.
    pub fn remove_state<C: ConnectionLike>(
        &self,
        con: &mut C,
        key: &[u8],
        now: Option<Ticks>,
    ) -> Result<Option<(A::State, Ticks)>, Error> {
        self.blocking(con, Call::of(Mode::Remove, key, 0, now), removed)
    }

    /// Asynchronous [`RedisLimiter::remove_state`].
    pub async fn remove_state_async<C: aio::ConnectionLike>(
        &self,
        con: &mut C,
        key: &[u8],
        now: Option<Ticks>,
    ) -> Result<Option<(A::State, Ticks)>, Error> {
        let call = Call::of(Mode::Remove, key, 0, now);
        self.awaiting(con, call, removed).await
    }

    /// Gives `key` `state` where it holds none (none of its Redis keys exists), in one
    /// atomic call: stored as a decision of cost 0 at `now` leaves it, with the bytes and
    /// the expiry the scripts give that decision (at the server's time if `now` is
    /// `None`; at an explicit `now`, no expiry, as every state written at one); nothing
    /// where it is fresh by then. Returns whether `key` held none; a key holding anything
    /// keeps it.
    pub fn seed_state<C: ConnectionLike>(
        &self,
        con: &mut C,
        key: &[u8],
        state: &A::State,
        now: Option<Ticks>,
    ) -> Result<bool, Error> {
        let values = self.algorithm.lua_encode(state);
        self.blocking(con, seed_call(key, &values, now), seeded)
    }

    /// Asynchronous [`RedisLimiter::seed_state`].
    pub async fn seed_state_async<C: aio::ConnectionLike>(
        &self,
        con: &mut C,
        key: &[u8],
        state: &A::State,
        now: Option<Ticks>,
    ) -> Result<bool, Error> {
        let values = self.algorithm.lua_encode(state);
        self.awaiting(con, seed_call(key, &values, now), seeded)
            .await
    }
}

/// The reply of a removal: the call's time, then the state's values.
fn removed<A: LuaAlgorithm>(
    algorithm: &A,
    reply: Value,
    call: &Call,
) -> Result<Option<(A::State, Ticks)>, Error> {
    let Value::Array(mut values) = reply else {
        return Err(Error::Reply);
    };
    if values.is_empty() {
        return Err(Error::Reply);
    }
    let now: Ticks = redis::from_redis_value(values.remove(0)).map_err(|_| Error::Reply)?;
    let state = algorithm
        .lua_decode(&reply::values(Value::Array(values))?)
        .map_err(|e| reply::corrupt(call.key, e.to_string()))?;
    Ok(state.map(|state| (state, now)))
}

/// The call seeding `key` with the encoded `values`.
fn seed_call<'a>(key: &'a [u8], values: &'a [Vec<u8>], now: Option<Ticks>) -> Call<'a> {
    Call::of(Mode::Seed, key, 0, now).with_values(values)
}

/// The reply of a seed: whether the key held nothing.
fn seeded<A>(_: &A, reply: Value, _: &Call) -> Result<bool, Error> {
    redis::from_redis_value::<u8>(reply)
        .map(|seeded| seeded == 1)
        .map_err(|_| Error::Reply)
}
