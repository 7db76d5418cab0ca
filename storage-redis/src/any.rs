//! The core's one dynamic algorithm on Redis: each variant runs its own script, so
//! [`AnyAlgorithm`] decides and stores there exactly as the algorithm it holds.

use redis::Cmd;
use sluicegate_core::{
    Algorithm, AnyAlgorithm, AnyState, CalendarLimit, CalendarPeriod, CalendarWindowAt, Decision,
    DecodeError, Ticks,
};

use crate::lua::{FastAsk, LuaAlgorithm};
use crate::Error;

/// Calls `$body` on whichever algorithm `$any` holds; a calendar window as the window in
/// its calendar's period holding `$at` (the scripts and the module take a period, see
/// [`CalendarWindowAt`]), or with `None` in any period, for what every period answers
/// alike (its files, cost cap, keys, fast path), asking the calendar nothing.
macro_rules! each {
    ($any:expr, $at:expr, |$a:ident| $body:expr) => {
        match $any {
            AnyAlgorithm::CalendarWindow(calendar) => {
                let $a = &in_period(calendar, $at);
                $body
            }
            AnyAlgorithm::FixedWindow($a) => $body,
            AnyAlgorithm::SlidingLog($a) => $body,
            AnyAlgorithm::SlidingCounter($a) => $body,
            AnyAlgorithm::TokenBucket($a) => $body,
            AnyAlgorithm::LeakyBucket($a) => $body,
            AnyAlgorithm::Pacing($a) => $body,
            AnyAlgorithm::Composite($a) => $body,
            AnyAlgorithm::Ban($a) => {
                let $a = &**$a;
                $body
            }
        }
    };
}

/// `limit`'s window in the period of its calendar holding `at`; without a time, in a
/// period of one tick.
fn in_period(limit: &CalendarLimit, at: Option<Ticks>) -> CalendarWindowAt {
    let period = match at {
        Some(at) => limit.calendar().period_at(at),
        None => CalendarPeriod::new(0, 1).expect("one tick is a period"),
    };
    limit.window().during(period)
}

impl LuaAlgorithm for AnyAlgorithm {
    fn lua_files(&self, files: &mut Vec<&'static str>) {
        each!(self, None, |a| a.lua_files(files));
    }

    fn lua_args(&self, cost: u64, at: Ticks, cmd: &mut Cmd) {
        each!(self, Some(at), |a| a.lua_args(cost, at, cmd));
    }

    fn module_args(&self, at: Ticks, cmd: &mut Cmd) {
        each!(self, Some(at), |a| a.module_args(at, cmd));
    }

    fn lua_cost_cap(&self) -> u64 {
        each!(self, None, |a| a.lua_cost_cap())
    }

    fn lua_range(&self) -> Result<(), Error> {
        each!(self, None, |a| a.lua_range())
    }

    fn lua_now_range(&self, now: Ticks) -> Result<(), Error> {
        each!(self, None, |a| a.lua_now_range(now))
    }

    fn lua_keys(&self) -> usize {
        each!(self, None, |a| a.lua_keys())
    }

    fn lua_fast_arg(&self, ask: FastAsk) -> Option<Vec<u8>> {
        each!(self, None, |a| a.lua_fast_arg(ask))
    }

    fn lua_fast_decision(&self, relative: u64, ask: FastAsk) -> Option<Decision> {
        each!(self, None, |a| a.lua_fast_decision(relative, ask))
    }

    /// A composite's members' own; any other one key's.
    fn lua_encode(&self, state: &AnyState) -> Vec<Vec<u8>> {
        match (self, state) {
            (AnyAlgorithm::Composite(a), AnyState::Composite(s)) => a.lua_encode(s),
            _ => vec![self.encode_to_vec(state)],
        }
    }

    fn lua_decode(&self, values: &[Option<Vec<u8>>]) -> Result<Option<AnyState>, DecodeError> {
        Ok(match self {
            AnyAlgorithm::FixedWindow(a) => a.lua_decode(values)?.map(AnyState::FixedWindow),
            AnyAlgorithm::SlidingLog(a) => a.lua_decode(values)?.map(AnyState::SlidingLog),
            AnyAlgorithm::SlidingCounter(a) => a.lua_decode(values)?.map(AnyState::SlidingCounter),
            AnyAlgorithm::TokenBucket(a) => a.lua_decode(values)?.map(AnyState::TokenBucket),
            AnyAlgorithm::LeakyBucket(a) => a.lua_decode(values)?.map(AnyState::LeakyBucket),
            AnyAlgorithm::Pacing(a) => a.lua_decode(values)?.map(AnyState::Pacing),
            AnyAlgorithm::Composite(a) => a.lua_decode(values)?.map(AnyState::Composite),
            AnyAlgorithm::Ban(a) => a.lua_decode(values)?.map(|s| AnyState::Ban(Box::new(s))),
            // A state's bytes are the same in every period.
            AnyAlgorithm::CalendarWindow(a) => in_period(a, None)
                .lua_decode(values)?
                .map(AnyState::CalendarWindow),
        })
    }
}
