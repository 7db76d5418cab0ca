//! The core's one dynamic algorithm on Redis: each variant runs its own script, so
//! [`AnyAlgorithm`] decides and stores there exactly as the algorithm it holds.

use redis::Cmd;
use sluicegate_core::{AnyAlgorithm, AnyState, Decision, DecodeError, Request, Ticks};

use crate::lua::LuaAlgorithm;
use crate::Error;

/// Calls `$method` on whichever algorithm `$any` holds; a calendar window (not on Redis
/// in this build: `lua_range` refuses it, before any call) answers `$calendar`.
macro_rules! each {
    ($any:expr, |$a:ident| $body:expr) => {
        each!($any, |$a| $body, Default::default())
    };
    ($any:expr, |$a:ident| $body:expr, $calendar:expr) => {
        match $any {
            AnyAlgorithm::CalendarWindow(_) => $calendar,
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

impl LuaAlgorithm for AnyAlgorithm {
    fn lua_files(&self, files: &mut Vec<&'static str>) {
        each!(self, |a| a.lua_files(files));
    }

    fn lua_args(&self, cost: u64, cmd: &mut Cmd) {
        each!(self, |a| a.lua_args(cost, cmd));
    }

    fn module_args(&self, cmd: &mut Cmd) {
        each!(self, |a| a.module_args(cmd));
    }

    fn lua_cost_cap(&self) -> u64 {
        each!(self, |a| a.lua_cost_cap())
    }

    fn lua_range(&self) -> Result<(), Error> {
        each!(self, |a| a.lua_range(), {
            let why = "calendar windows are not on Redis in this build";
            Err(Error::Redis(
                (redis::ErrorKind::InvalidClientConfig, why).into(),
            ))
        })
    }

    fn lua_keys(&self) -> usize {
        each!(self, |a| a.lua_keys())
    }

    fn lua_fast_arg(&self, request: &Request<'_>, max_wait: Option<Ticks>) -> Option<Vec<u8>> {
        each!(self, |a| a.lua_fast_arg(request, max_wait))
    }

    fn lua_fast_decision(
        &self,
        relative: u64,
        cost: u64,
        max_wait: Option<Ticks>,
    ) -> Option<Decision> {
        each!(self, |a| a.lua_fast_decision(relative, cost, max_wait))
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
            AnyAlgorithm::CalendarWindow(_) => None,
        })
    }
}
