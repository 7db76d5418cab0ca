//! The wasm halves of `Limiter` and `Throttle`; `limiter.js` holds the JS halves (the
//! options flattened, the clock, promises, timers and abort signals). Only numbers,
//! strings and bytes cross, and a decision crosses as six numbers in this module's
//! memory, which JS reads through a view: a call allocates nothing.

use alloc::string::String;
use alloc::vec::Vec;

use sluicegate_core::clock::MAX_TICKS;
use sluicegate_core::Ticks;
use wasm_bindgen::prelude::*;

use crate::error::Error;
use crate::limit::{Call, Limit};
use crate::options::{algorithm, Flat};
use crate::scheduler::{Budget, Next, Scheduler};
use crate::units::{ms_from_ticks, ticks_from_ms, whole, Slots};

/// `check`, `peek` and `reserve`: denied, allowed (the decision in the slots), or
/// invalid input (the message in `rejection`). Throwing from inside the call would
/// leave the limiter borrowed.
const INVALID: u32 = 2;

/// The limit flattened options describe (`texts` joined by newlines).
fn limit_from(texts: &str, numbers: &[f64]) -> Result<Limit, Error> {
    let texts: Vec<&str> = texts.split('\n').collect();
    Limit::new(algorithm(&Flat::root(numbers, &texts))?)
}

fn thrown(error: &Error) -> JsError {
    JsError::new(&error.message())
}

/// A request's cost and time, checked.
#[inline(always)]
fn request(cost: f64, now_ms: f64) -> Result<(u64, Ticks), Error> {
    Ok((whole("cost", cost)?, ticks_from_ms("nowMs", now_ms)?))
}

/// The module's memory, for the views `limiter.js` reads decisions through.
#[wasm_bindgen(js_name = wasmMemory)]
pub fn wasm_memory() -> JsValue {
    wasm_bindgen::memory()
}

/// What `LimiterCore::next` asks: nothing is queued, run the call `at` names, or
/// wait until `at`.
const IDLE: u32 = 0;
const RUN: u32 = 1;
const WAIT: u32 = 2;

/// The wasm half of `Limiter` and of `Throttle` (`limiter.js`): a limit, and the queue
/// of call ids a throttle runs under it (one class: each export costs glue). Not meant
/// to be used directly. Times are milliseconds since the Unix epoch (fractions allowed,
/// exact to the microsecond).
#[wasm_bindgen]
#[derive(Debug)]
pub struct LimiterCore {
    scheduler: Scheduler<u32>,
    slots: Slots,
    at: f64,
    rejection: String,
}

impl LimiterCore {
    /// Lands `call` on a request of `cost` at `now_ms`, each checked in that order: 0
    /// denied, 1 allowed, or invalid. Inlined, the error kept out of line: the hot call passes no `Result`
    /// through memory.
    #[inline(always)]
    fn land(&mut self, cost: f64, now_ms: f64, call: impl FnOnce() -> Result<Call, Error>) -> u32 {
        let landed = request(cost, now_ms).and_then(|(cost, now)| {
            let call = call()?;
            self.scheduler
                .limit()
                .land(call, now, cost, &mut self.slots)
        });
        match landed {
            Ok(allowed) => u32::from(allowed),
            Err(error) => self.reject(&error),
        }
    }

    #[cold]
    #[inline(never)]
    fn reject(&mut self, error: &Error) -> u32 {
        self.rejection = error.message();
        INVALID
    }
}

#[wasm_bindgen]
impl LimiterCore {
    /// A fresh limiter from options as `flatten` writes them, holding at most
    /// `maxQueued` waiting calls. Throws an `Error` naming the first invalid option.
    #[wasm_bindgen(constructor)]
    pub fn new(
        texts: &str,
        numbers: &[f64],
        #[wasm_bindgen(js_name = maxQueued)] max_queued: f64,
    ) -> Result<LimiterCore, JsError> {
        let built = limit_from(texts, numbers).and_then(|limit| {
            let max_queued = whole("maxQueued", max_queued)?;
            let most = usize::try_from(max_queued)
                .ok()
                .filter(|&n| n > 0)
                .ok_or(Error::MaxQueued(max_queued))?;
            Ok(Scheduler::new(limit, most))
        });
        Ok(Self {
            scheduler: built.map_err(|e| thrown(&e))?,
            slots: [0.0; 6],
            at: 0.0,
            rejection: String::new(),
        })
    }

    /// Where the decisions land: six numbers in the module's memory.
    pub fn slots(&self) -> *const f64 {
        self.slots.as_ptr()
    }

    /// Decides a request of `cost` and, if admitted, counts it.
    pub fn check(&mut self, cost: f64, #[wasm_bindgen(js_name = nowMs)] now_ms: f64) -> u32 {
        self.land(cost, now_ms, || Ok(Call::Check))
    }

    /// What `check` would answer, changing nothing.
    pub fn peek(&mut self, cost: f64, #[wasm_bindgen(js_name = nowMs)] now_ms: f64) -> u32 {
        self.land(cost, now_ms, || Ok(Call::Peek))
    }

    /// Books a slot within `maxWaitMs`: if admitted, act after `delayMs`. Buckets,
    /// pacing and composites of them only.
    pub fn reserve(
        &mut self,
        cost: f64,
        #[wasm_bindgen(js_name = maxWaitMs)] max_wait_ms: f64,
        #[wasm_bindgen(js_name = nowMs)] now_ms: f64,
    ) -> u32 {
        self.land(cost, now_ms, || {
            ticks_from_ms("maxWaitMs", max_wait_ms).map(Call::Reserve)
        })
    }

    /// Reports a cost known after the work: `adjustment` units added to what the limiter
    /// has taken (negative: given back), within its `overdraft`. Returns the units
    /// recorded; what a request of cost 0 gets after it lands in the slots. Throws on
    /// pacing and bans (they take no reports) and on an adjustment that is not whole.
    #[cfg(feature = "full")]
    pub fn report(
        &mut self,
        adjustment: f64,
        #[wasm_bindgen(js_name = nowMs)] now_ms: f64,
    ) -> Result<f64, JsError> {
        let reported = whole("adjustment", adjustment.abs()).and_then(|units| {
            // At most 2^53 - 1: fits.
            #[allow(clippy::cast_possible_wrap)]
            let units = units as i64;
            let now = ticks_from_ms("nowMs", now_ms)?;
            let adjustment = if adjustment < 0.0 { -units } else { units };
            self.scheduler.limit().report(now, adjustment)
        });
        let reported = reported.map_err(|e| thrown(&e))?;
        crate::units::land(&mut self.slots, &reported.decision);
        #[allow(clippy::cast_precision_loss)] // At most 2^53 - 1: exact.
        Ok(reported.recorded as f64)
    }

    /// Why the last `check`, `peek`, `reserve` or `push` answered invalid or refused.
    pub fn rejection(&mut self) -> String {
        core::mem::take(&mut self.rejection)
    }

    /// Queues call `id` of `cost` at `nowMs`: 0 queued; 1 refused (a full queue, a cost
    /// that can never fit) and 2 invalid, each with a `rejection`.
    pub fn push(
        &mut self,
        id: u32,
        cost: f64,
        #[wasm_bindgen(js_name = nowMs)] now_ms: f64,
    ) -> u32 {
        let pushed = request(cost, now_ms).map(|(cost, now)| self.scheduler.push(id, cost, now));
        let (code, error) = match pushed {
            Ok(Ok(())) => return 0,
            Ok(Err((_, error))) => (1, error),
            Err(error) => (2, error),
        };
        self.rejection = error.message();
        code
    }

    /// What to do at `nowMs`: 0 nothing is queued, 1 run the call `at` names, 2 wait
    /// until `at`.
    pub fn next(&mut self, #[wasm_bindgen(js_name = nowMs)] now_ms: f64) -> u32 {
        // JS's clock always reads a valid time.
        let now = ticks_from_ms("nowMs", now_ms).unwrap_or_default();
        match self.scheduler.next(now) {
            Next::Run(id) => {
                self.at = f64::from(id);
                RUN
            }
            Next::WaitUntil(at) => {
                self.at = ms_from_ticks(at);
                WAIT
            }
            Next::Idle => IDLE,
        }
    }

    /// The call to run, or the instant to wait for, that `next` named.
    #[wasm_bindgen(getter)]
    pub fn at(&self) -> f64 {
        self.at
    }

    /// Takes call `id` out of the queue (aborted); whether it was waiting.
    pub fn remove(&mut self, id: u32) -> bool {
        self.scheduler.remove(|&queued| queued == id).is_some()
    }

    /// What the server asked (read from its headers by `limiter.js`), each NaN when it
    /// did not: nothing runs before `resumeAtMs` (`Retry-After`), and at most
    /// `remaining` units until `untilMs` (`RateLimit`).
    pub fn observe(
        &mut self,
        #[wasm_bindgen(js_name = resumeAtMs)] resume_at_ms: f64,
        remaining: f64,
        #[wasm_bindgen(js_name = untilMs)] until_ms: f64,
    ) {
        // A server's figures beyond the range saturate; NaN is absent.
        let instant =
            |ms: f64| (!ms.is_nan()).then(|| ticks_from_ms("at", ms).unwrap_or(MAX_TICKS));
        if let Some(at) = instant(resume_at_ms) {
            self.scheduler.pause_until(at);
        }
        if let (Some(until), false) = (instant(until_ms), remaining.is_nan()) {
            let remaining = whole("remaining", remaining).unwrap_or(u64::MAX);
            self.scheduler.set_budget(Budget { remaining, until });
        }
    }

    /// How many calls are waiting.
    #[wasm_bindgen(getter)]
    pub fn queued(&self) -> usize {
        self.scheduler.len()
    }

    /// The state in sluicegate's canonical encoding (empty when fresh); the same bytes
    /// the Rust hosts store.
    pub fn save(&mut self) -> Vec<u8> {
        self.scheduler.limit().save()
    }

    /// Restores a state `save` returned. Throws, keeping the current state, if the bytes
    /// are not a state of this limiter.
    pub fn load(&mut self, bytes: &[u8]) -> Result<(), JsError> {
        self.scheduler.limit().load(bytes).map_err(|e| thrown(&e))
    }

    /// Forgets everything: the limiter is fresh again.
    pub fn reset(&mut self) {
        self.scheduler.limit().reset();
    }
}
