#![doc = include_str!("../README.md")]
#![deny(missing_docs)]
#![warn(unreachable_pub)]
// Unit tests run without a server: the commands are registered only in the real build.
#![cfg_attr(test, allow(dead_code))]

mod algorithm;
mod args;
mod cell;
mod engine;
mod host;
#[cfg(test)]
mod tests;

use sluicegate_core::clock::{Clock, SystemClock};
use sluicegate_core::{Decision, Ticks};

use args::Args;
use engine::{
    keys, Failure, LeaseOp, LeaseRequest, ReportRequest, Request, Write, Writes, MAX_BATCH_KEYS,
    MAX_KEYS,
};
use host::{Call, Error, Key, Reply};

/// The server's time in microseconds since the Unix epoch: the wall clock `TIME` reads
/// (the scripts' clock), not Redis's cached command time, which has only milliseconds:
/// the core's [`SystemClock`], as every host reading the wall clock.
fn server_now() -> Ticks {
    SystemClock.now()
}

fn error(failure: impl std::fmt::Display) -> Error {
    failure.to_string()
}

/// Answers Redis's question "which arguments are keys" for `numkeys key...` commands
/// of at most `max` keys (Cluster routing, ACLs); `true` if it was that question.
fn key_positions(call: &Call<'_>, args: &[&[u8]], max: u64) -> bool {
    if !call.is_keys_position_request() {
        return false;
    }
    if let Ok(keys) = keys(&mut Args::new(args), max) {
        // Only positions that exist: the numkeys parser read every one of them.
        for i in 0..keys.len() {
            call.key_at(i + 2);
        }
    }
    true
}

/// Opens the command's argument `pos` as a key.
fn open_key<'c>(call: &'c Call<'_>, pos: usize, write: bool) -> Result<Key<'c>, Error> {
    call.open(pos, write)
        .ok_or_else(|| error("ERR wrong number of arguments"))
}

/// Opens `count` keys of a `numkeys key...` command from key `first` on (argument
/// `first + 2`).
fn open_keys<'c>(
    call: &'c Call<'_>,
    first: usize,
    count: usize,
    write: bool,
) -> Result<Vec<Key<'c>>, Error> {
    (first + 2..first + 2 + count)
        .map(|pos| open_key(call, pos, write))
        .collect()
}

/// The values of `keys`, each `None` if absent; a key of another type is refused.
fn values<'k>(keys: &'k [Key<'_>]) -> Result<Vec<Option<&'k [u8]>>, Error> {
    keys.iter()
        .map(Key::value)
        .collect::<Result<_, _>>()
        .map_err(error)
}

fn check(call: &Call<'_>, args: &[&[u8]]) -> Result<Reply, Error> {
    decide(call, args, true)
}

fn peek(call: &Call<'_>, args: &[&[u8]]) -> Result<Reply, Error> {
    decide(call, args, false)
}

/// `SLUICEGATE.CHECK` (`write`) or `SLUICEGATE.PEEK` (nothing stored).
fn decide(call: &Call<'_>, args: &[&[u8]], write: bool) -> Result<Reply, Error> {
    if key_positions(call, args, MAX_KEYS) {
        return Ok(Reply::KeyPositions);
    }
    let request = Request::parse(args, write).map_err(|e| error(Failure::Arg(e)))?;
    let now = request.now.unwrap_or_else(server_now);
    let explicit = request.now.is_some();
    request.limit.check_period(now, explicit).map_err(error)?;
    let decision = decide_keys(call, &request, 0, now, write)?;
    Ok(Reply::Integers(engine::reply(&decision, now).into()))
}

/// Decides `request` at `now` on the keys from key `first` of the command on (one per
/// member), storing the new states if `write`. One key, the common case, is decided
/// with no vector of keys or values.
fn decide_keys(
    call: &Call<'_>,
    request: &Request<'_>,
    first: usize,
    now: Ticks,
    write: bool,
) -> Result<Decision, Error> {
    let explicit = request.now.is_some();
    if let [_] = request.keys {
        let mut key = open_key(call, first + 2, write)?;
        let value = key.value().map_err(error)?;
        let had = value.is_some();
        let (decision, mut writes) = request.decide(&[value], now).map_err(error)?;
        if write {
            key.store(had, writes.next().flatten(), now, explicit)?;
        }
        return Ok(decision);
    }
    let keys = (first, request.keys.len(), write);
    on_keys(call, keys, now, explicit, |values| {
        request.decide(values, now)
    })
}

/// Runs `run` on the values of the `(first, count, write)` keys of the command (see
/// [`open_keys`]) and stores what it writes at `now` if `write`.
fn on_keys<T>(
    call: &Call<'_>,
    (first, count, write): (usize, usize, bool),
    now: Ticks,
    explicit: bool,
    run: impl FnOnce(&[Option<&[u8]>]) -> Result<(T, Writes), Failure>,
) -> Result<T, Error> {
    let mut keys = open_keys(call, first, count, write)?;
    let values = values(&keys)?;
    let had: Vec<bool> = values.iter().map(Option::is_some).collect();
    let (answer, writes) = run(&values).map_err(error)?;
    drop(values);
    if write {
        for ((key, had), new) in keys.iter_mut().zip(had).zip(writes) {
            key.store(had, new, now, explicit)?;
        }
    }
    Ok(answer)
}

/// `SLUICEGATE.REPORT`: the core's report of a signed adjustment on the keys (see
/// `docs/design/reported-costs.md`); replies the decision a cost of zero gets afterwards
/// (as `SLUICEGATE.CHECK` replies it), then the units recorded.
fn report(call: &Call<'_>, args: &[&[u8]]) -> Result<Reply, Error> {
    if key_positions(call, args, MAX_KEYS) {
        return Ok(Reply::KeyPositions);
    }
    let report = ReportRequest::parse(args).map_err(|e| error(Failure::Arg(e)))?;
    let request = &report.request;
    let now = request.now.unwrap_or_else(server_now);
    let keys = (0, request.keys.len(), true);
    let explicit = request.now.is_some();
    request.limit.check_period(now, explicit).map_err(error)?;
    let reported = on_keys(call, keys, now, explicit, |values| {
        report.report(values, now)
    })?;
    let [allowed, limit, remaining, retry, reset, delay, now] =
        engine::reply(&reported.decision, now);
    let recorded = engine::signed(reported.recorded);
    Ok(Reply::Integers(
        [
            allowed, limit, remaining, retry, reset, delay, now, recorded,
        ]
        .into(),
    ))
}

/// `SLUICEGATE.BATCH`: decides each request in order at one time, each as its own
/// `SLUICEGATE.CHECK` would (a key repeated sees what its earlier request stored). The
/// reply is one bulk string of records, one per request (see the crate's docs).
fn batch(call: &Call<'_>, args: &[&[u8]]) -> Result<Reply, Error> {
    if key_positions(call, args, MAX_BATCH_KEYS) {
        return Ok(Reply::KeyPositions);
    }
    let (mut request, costs) = Request::parse_batch(args).map_err(|e| error(Failure::Arg(e)))?;
    let now = request.now.unwrap_or_else(server_now);
    let explicit = request.now.is_some();
    let members = request.keys.len();
    let mut records = Vec::with_capacity(costs.len() * 49);
    for (i, cost) in costs.into_iter().enumerate() {
        request.cost = cost;
        // Past a calendar window's period, each request is refused as it would be alone.
        let in_period = request.limit.check_period(now, explicit).map_err(error);
        match in_period.and_then(|()| decide_keys(call, &request, i * members, now, true)) {
            Ok(decision) => {
                records.push(1);
                for field in &engine::reply(&decision, now)[..6] {
                    records.extend_from_slice(&field.to_be_bytes());
                }
            }
            Err(text) => {
                records.push(2);
                let len = u32::try_from(text.len()).unwrap_or(u32::MAX);
                records.extend_from_slice(&len.to_be_bytes());
                records.extend(text.bytes().take(len as usize));
            }
        }
    }
    Ok(Reply::Bytes(records))
}

/// `SLUICEGATE.RESET`: deletes the keys if each is absent or a valid state, else refuses;
/// replies how many keys were deleted.
fn reset(call: &Call<'_>, args: &[&[u8]]) -> Result<Reply, Error> {
    if key_positions(call, args, MAX_KEYS) {
        return Ok(Reply::KeyPositions);
    }
    let request = Request::parse(args, false).map_err(|e| error(Failure::Arg(e)))?;
    if request.now.is_some() || request.cost != 1 {
        return Err(error("ERR SLUICEGATE.RESET takes no COST or NOW"));
    }
    let mut keys = open_keys(call, 0, request.keys.len(), true)?;
    let values = values(&keys)?;
    request.validate(&values).map_err(error)?;
    let had: Vec<bool> = values.iter().map(Option::is_some).collect();
    drop(values);
    let mut deleted = 0;
    for (key, had) in keys.iter_mut().zip(had) {
        if had {
            key.store(true, None, 0, true)?;
            deleted += 1;
        }
    }
    Ok(Reply::Integer(deleted))
}

/// Decides on the key of the one-key commands, their first argument (their parsers have
/// already required it), and stores what `decide` writes at `now` (`explicit`: given
/// by the caller).
fn on_first_key<T>(
    call: &Call<'_>,
    now: Ticks,
    explicit: bool,
    decide: impl FnOnce(Option<&[u8]>) -> Result<(T, Write), Error>,
) -> Result<T, Error> {
    let mut key = open_key(call, 1, true)?;
    let value = key.value().map_err(error)?;
    let had = value.is_some();
    let (answer, write) = decide(value)?;
    key.store(had, write, now, explicit)?;
    Ok(answer)
}

fn lease(call: &Call<'_>, args: &[&[u8]], op: LeaseOp) -> Result<Reply, Error> {
    let request = LeaseRequest::parse(args, op).map_err(error)?;
    let now = request.now.unwrap_or_else(server_now);
    let reply = on_first_key(call, now, request.now.is_some(), |value| {
        request.run(op, value, now).map_err(error)
    })?;
    let fields = reply.fields(now);
    Ok(if request.packed {
        Reply::Packed(fields)
    } else {
        Reply::Integers(fields)
    })
}

fn lease_acquire(call: &Call<'_>, args: &[&[u8]]) -> Result<Reply, Error> {
    lease(call, args, LeaseOp::Acquire)
}

fn lease_release(call: &Call<'_>, args: &[&[u8]]) -> Result<Reply, Error> {
    lease(call, args, LeaseOp::Release)
}

fn lease_renew(call: &Call<'_>, args: &[&[u8]]) -> Result<Reply, Error> {
    lease(call, args, LeaseOp::Renew)
}

/// `CL.THROTTLE`, as redis-cell's.
fn throttle(call: &Call<'_>, args: &[&[u8]]) -> Result<Reply, Error> {
    let throttle = cell::Throttle::parse(args).map_err(error)?;
    let now = server_now();
    let decision = on_first_key(call, now, false, |value| {
        throttle
            .decide(value, now)
            .map_err(|e| error(Failure::Corrupt(e)))
    })?;
    Ok(Reply::Integers(cell::reply(&decision).into()))
}

/// The module's entry points, which Redis calls by name (left out of unit tests, which
/// run without a server and its allocator).
#[cfg(not(test))]
#[allow(missing_docs)]
mod load {
    use redis_module::{Context, RedisString, Status};

    use super::host::{self, entry};
    use super::{
        batch, check, lease_acquire, lease_release, lease_renew, peek, report, reset, throttle,
    };

    /// Registers the commands on the module API directly (see `host`).
    fn init(ctx: &Context, _args: &[RedisString]) -> Status {
        host::init();
        // `numkeys key...` commands tell Redis their keys when asked (getkeys-api); the
        // others have one key, the first argument.
        let (numkeys, one_key) = ((2, 2, 1), (1, 1, 1));
        #[rustfmt::skip]
        let commands: [(&std::ffi::CStr, host::Entry, &std::ffi::CStr, _); 9] = [
            (c"sluicegate.check", entry!(check), c"write deny-oom getkeys-api", numkeys),
            (c"sluicegate.report", entry!(report), c"write deny-oom getkeys-api", numkeys),
            (c"sluicegate.batch", entry!(batch), c"write deny-oom getkeys-api", numkeys),
            (c"sluicegate.peek", entry!(peek), c"readonly getkeys-api", numkeys),
            (c"sluicegate.reset", entry!(reset), c"write getkeys-api", numkeys),
            (c"sluicegate.lease.acquire", entry!(lease_acquire), c"write deny-oom", one_key),
            (c"sluicegate.lease.release", entry!(lease_release), c"write", one_key),
            (c"sluicegate.lease.renew", entry!(lease_renew), c"write deny-oom", one_key),
            (c"cl.throttle", entry!(throttle), c"write deny-oom", one_key),
        ];
        let raw = ctx.get_raw();
        for (name, entry, flags, keys) in commands {
            if !host::register(raw, name, entry, flags, keys) {
                ctx.log_warning(&format!("sluicegate: could not register {name:?}"));
                return Status::Err;
            }
        }
        Status::Ok
    }

    redis_module::redis_module! {
        name: "sluicegate",
        version: 1,
        allocator: (redis_module::alloc::RedisAlloc, redis_module::alloc::RedisAlloc),
        data_types: [],
        init: init,
        commands: [],
    }
}
