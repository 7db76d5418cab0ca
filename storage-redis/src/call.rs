//! One script call (what it does, a key, a cost, the time and the longest wait) and its
//! arguments as every route sends them: the library, a script, or the module.

use redis::{Cmd, ToRedisArgs};
use sluicegate_core::limits::MAX_WAIT;
use sluicegate_core::{Clock, Request, SystemClock, Ticks};

use crate::error::Error;
use crate::lua::{FastAsk, LuaAlgorithm};
use crate::route::{Invocation, Program};

/// One script call: what it does, a key, a cost, and optionally the time and the
/// longest wait.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Call<'a> {
    pub(crate) mode: Mode,
    pub(crate) key: &'a [u8],
    pub(crate) cost: u64,
    pub(crate) now: Option<Ticks>,
    pub(crate) max_wait: Option<Ticks>,
    /// Where a call without `now` takes a calendar's period (see [`Arguments::at`]):
    /// a batch's one reading of this machine's clock, or on a retry the server's time
    /// it refused the call at; `None`: this machine's clock when the call is built.
    pub(crate) clock: Option<Ticks>,
    /// A seed's values, one per Redis key, sent after the algorithm's arguments.
    pub(crate) values: &'a [Vec<u8>],
}

/// What a script call does (its first argument; see `lua/main.lua`).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Mode {
    /// Decide a request and store the new state.
    Decide,
    /// Return the keys' values, refusing keys of other types.
    Read,
    /// Delete the keys if each is absent or a valid state, else refuse.
    Reset,
    /// As `Reset`, returning the time and the values deleted.
    Remove,
    /// Store the call's values where none of the keys exists.
    Seed,
    /// Delete the keys holding a valid state.
    Purge,
    /// Take up to `cost` units (fleets).
    Take,
    /// Give `cost` units back before a deadline (fleets).
    Refund,
    /// Add a report's signed adjustment to what the key has taken.
    Report(i64),
}

/// The largest adjustment a report sends the scripts: every larger one records what it
/// does (each bound is below it), and it is exact in Lua.
const MAX_LUA_ADJUSTMENT: i64 = 1 << 52;

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Self::Decide => "decide",
            Self::Read => "read",
            Self::Reset => "reset",
            Self::Remove => "remove",
            Self::Seed => "seed",
            Self::Purge => "purge",
            Self::Take => "take",
            Self::Refund => "refund",
            Self::Report(_) => "report",
        }
    }
}

impl<'a> Call<'a> {
    /// A call of `mode` on `key` for `cost` (units, for a take or a refund).
    pub(crate) fn of(mode: Mode, key: &'a [u8], cost: u64, now: Option<Ticks>) -> Self {
        Self {
            mode,
            key,
            cost,
            now,
            max_wait: None,
            clock: None,
            values: &[],
        }
    }

    /// A decision of `cost` on `key`.
    pub(crate) fn new(key: &'a [u8], cost: u64, now: Option<Ticks>) -> Self {
        Self::of(Mode::Decide, key, cost, now)
    }

    /// The decision of `request`.
    pub(crate) fn request(request: &Request<'a>) -> Self {
        Self::new(request.key, request.cost, request.now)
    }

    /// A call that decides nothing: cost 0 at the server's time.
    pub(crate) fn mode(key: &'a [u8], mode: Mode) -> Self {
        Self::of(mode, key, 0, None)
    }

    /// The decisions of a batch's `requests`, those without a time taking a calendar's
    /// period at one reading of the clock: at the server's one time, all are decided or
    /// all refused in a period (see [`Self::retry`]).
    pub(crate) fn batch(requests: &[Request<'a>]) -> Vec<Self> {
        let clock = SystemClock.now();
        requests
            .iter()
            .map(|r| Self::request(r).clocked(clock))
            .collect()
    }

    /// The same call taking a calendar's period at `clock` when it has no `now`.
    pub(crate) fn clocked(self, clock: Ticks) -> Self {
        Self {
            clock: Some(clock),
            ..self
        }
    }

    /// The call to make again after `result`: when the server refused this one as out
    /// of the period it was given (this machine's clock and the server's disagree near
    /// a boundary), the same call in the period holding the server's time.
    pub(crate) fn retry<T>(&self, result: &Result<T, Error>) -> Option<Self> {
        match result {
            Err(Error::OutOfPeriod { now }) => Some(self.clocked(*now)),
            _ => None,
        }
    }

    /// The same call doing `mode` (a take or a refund of the request's cost).
    pub(crate) fn mode_of(self, mode: Mode) -> Self {
        Self { mode, ..self }
    }

    /// What this call asks of `algorithm`'s fast path, its cost clamped to the cap.
    pub(crate) fn fast_ask<A: LuaAlgorithm>(&self, algorithm: &A) -> FastAsk {
        FastAsk {
            cost: self.cost.min(algorithm.lua_cost_cap()),
            now: self.now,
            max_wait: self.max_wait,
        }
    }

    /// The same call sending `values` after the algorithm's arguments (a seed's).
    pub(crate) fn with_values(self, values: &'a [Vec<u8>]) -> Self {
        Self { values, ..self }
    }

    /// The call with a longest wait (a refund's: its deadline).
    pub(crate) fn waiting(self, max_wait: Option<Ticks>) -> Self {
        Self { max_wait, ..self }
    }

    /// The invocation of this call on `keys`, route aside.
    pub(crate) fn invocation<A: LuaAlgorithm, K: ToRedisArgs>(
        &self,
        algorithm: &A,
        program: &Program,
        keys: &[K],
    ) -> Result<Invocation, Error> {
        let args = self.arguments(algorithm)?;
        let (function, read_only) = match args.fast {
            Some(_) => ("bucket", false),
            None => (self.mode.name(), matches!(self.mode, Mode::Read)),
        };
        let mut invocation = program.invocation(function, read_only, keys);
        self.append_lua(algorithm, &args, &mut invocation.cmd);
        if program.may_use_module() {
            invocation.module = self.module_command(algorithm, &args, keys);
        }
        Ok(invocation)
    }

    /// The module's command for this call: a decision's or a report's; `None` for the
    /// calls the module has no command for.
    fn module_command<A: LuaAlgorithm, K: ToRedisArgs>(
        &self,
        algorithm: &A,
        args: &Arguments,
        keys: &[K],
    ) -> Option<Cmd> {
        let name = match self.mode {
            Mode::Decide => "SLUICEGATE.CHECK",
            Mode::Report(_) => "SLUICEGATE.REPORT",
            _ => return None,
        };
        let mut module = redis::cmd(name);
        module.arg(keys.len()).arg(keys);
        algorithm.module_args(args.at, &mut module);
        match self.mode {
            Mode::Report(adjustment) => module.arg("ADJUST").arg(adjustment),
            _ => module.arg("COST").arg(args.cost),
        };
        if let Some(now) = self.now {
            module.arg("NOW").arg(now);
        }
        if let Some(max_wait) = args.max_wait {
            module.arg("MAXWAIT").arg(max_wait);
        }
        Some(module)
    }

    /// The cost, wait and fast argument as every route sends them; an error if the time
    /// is beyond the scripts' range.
    pub(crate) fn arguments<A: LuaAlgorithm>(&self, algorithm: &A) -> Result<Arguments, Error> {
        if let Some(now) = self.now {
            algorithm.lua_now_range(now)?;
        }
        // Every cost above the cap decides and stores like the cap.
        let cost = self.cost.min(algorithm.lua_cost_cap());
        let max_wait = match (self.mode, self.now) {
            // A refund at an explicit time: whether it is before the deadline, decided
            // here (the script compares the server's time only, below 2^53): no
            // deadline, or one already reached.
            (Mode::Refund, Some(now)) => self.max_wait.filter(|&d| now >= d).map(|_| 0),
            // Any wait beyond 2^53 ticks admits the same requests as an unbounded one.
            _ => self.max_wait.map(|w| w.min(MAX_WAIT)),
        };
        let fast = match self.mode {
            Mode::Decide => algorithm.lua_fast_arg(self.fast_ask(algorithm)),
            _ => None,
        };
        let at = match (self.now, self.clock) {
            (Some(now), _) | (None, Some(now)) => now,
            (None, None) => SystemClock.now(),
        };
        Ok(Arguments {
            cost,
            max_wait,
            fast,
            at,
        })
    }

    /// Appends the arguments for the library or a script, after the keys (see
    /// `lua/main.lua`): the fast path's one argument, or the mode, time, cost, wait and
    /// the algorithm.
    pub(crate) fn append_lua<A: LuaAlgorithm>(
        &self,
        algorithm: &A,
        args: &Arguments,
        cmd: &mut Cmd,
    ) {
        if let Some(arg) = &args.fast {
            cmd.arg(arg);
            return;
        }
        cmd.arg(self.mode.name()).arg(Arg(self.now));
        match self.mode {
            Mode::Report(adjustment) => {
                cmd.arg(adjustment.clamp(-MAX_LUA_ADJUSTMENT, MAX_LUA_ADJUSTMENT))
            }
            _ => cmd.arg(args.cost),
        };
        cmd.arg(Arg(args.max_wait));
        // A take's or refund's cost varies in the script: it scales it there.
        let scaled = if matches!(self.mode, Mode::Take | Mode::Refund | Mode::Report(_)) {
            0
        } else {
            args.cost
        };
        algorithm.lua_args(scaled, args.at, cmd);
        for value in self.values {
            cmd.arg(value);
        }
    }
}

/// A call's arguments as every route sends them (see [`Call::arguments`]).
#[derive(Debug)]
pub(crate) struct Arguments {
    /// The cost, clamped to the algorithm's cap.
    pub(crate) cost: u64,
    /// The longest wait, clamped to what the scripts compute.
    pub(crate) max_wait: Option<Ticks>,
    /// The fast path's one argument, when the call takes it.
    pub(crate) fast: Option<Vec<u8>>,
    /// The instant the algorithm's parameters are taken at: the period a calendar
    /// window is sent with is the one holding it. The call's `now`, so a decision at
    /// an explicit time is the core's; else [`Call::clock`] or this machine's clock,
    /// which the server checks against its own (refusing, unchanged, a time outside
    /// the period: the call goes again in the server's period, see [`Call::retry`]).
    ///
    /// It lives here, beside the cost and the wait, because every route (the library,
    /// a script, the module, one call or a batch) builds its arguments from these, so
    /// a calendar's period is chosen once per call, in one place, and the algorithms
    /// whose parameters are fixed ignore it.
    pub(crate) at: Ticks,
}

/// An optional script argument: empty when absent.
pub(crate) struct Arg(pub(crate) Option<u64>);

impl redis::ToRedisArgs for Arg {
    fn write_redis_args<W: ?Sized + redis::RedisWrite>(&self, out: &mut W) {
        match self.0 {
            Some(value) => value.write_redis_args(out),
            None => out.write_arg(b""),
        }
    }
}

impl redis::ToSingleRedisArg for Arg {}
