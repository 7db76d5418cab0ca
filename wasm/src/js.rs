//! The wasm halves of `Limiter` and `Throttle`; `limiter.js` holds the JS halves (the
//! options flattened, the clock, promises, timers and abort signals). Only numbers,
//! strings and bytes cross, and a decision crosses as six numbers in this module's
//! memory, which JS reads through a view: a call allocates nothing.

use alloc::boxed::Box;
use alloc::string::String;
use alloc::vec::Vec;

use spin::{Mutex, MutexGuard};

use sluicegate_core::clock::MAX_TICKS;
use sluicegate_core::Ticks;
use wasm_bindgen::prelude::*;

use crate::error::Error;
use crate::limit::{Call, Limit};
use crate::options::{algorithm, Flat};
use crate::scheduler::{Budget, Next, Scheduler};
use crate::units::{ms_from_ticks, ticks_from_ms, whole, Slots};

/// `decide`: denied, allowed (the decision in the slots), or invalid input (the message
/// in `rejection`). Throwing from inside the call would leave the limiters locked.
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

/// What `LimiterCore::next` asks: nothing is queued, run the call `at` names, wait
/// until `at`, or refuse the call `at` names (with a `rejection`).
const IDLE: u32 = 0;
const RUN: u32 = 1;
const WAIT: u32 = 2;
const REFUSE: u32 = 3;

/// `decide`'s answer for a handle whose limiter was freed.
const FREED: u32 = 3;

/// What `decide` runs: `Limiter`'s `check`, `peek` and `reserve`.
const CHECK: u32 = 0;
const PEEK: u32 = 1;

/// Every live limiter's half, by handle. `decide` reaches it with a free function's
/// call, a third of a method's: no shared count or borrow flag to keep.
static LIMITERS: Mutex<Vec<Option<Box<Inner>>>> = Mutex::new(Vec::new());

/// The limiters, which no call holds while another runs (nothing here calls back into
/// JS that could call in again); held, a limiter's earlier call trapped.
fn limiters() -> MutexGuard<'static, Vec<Option<Box<Inner>>>> {
    LIMITERS.try_lock().unwrap_or_else(|| trap())
}

/// Stops the module: reached only after an earlier trap (no formatting linked).
#[cold]
fn trap() -> ! {
    #[cfg(target_arch = "wasm32")]
    core::arch::wasm32::unreachable();
    #[cfg(not(target_arch = "wasm32"))]
    unreachable!("a limiter's earlier call trapped");
}

/// A limiter's half: boxed, so its slots stay where `slots` said.
#[derive(Debug)]
struct Inner {
    scheduler: Scheduler<u32>,
    slots: Slots,
    at: f64,
    rejection: String,
}

impl Inner {
    /// Lands `call` on a request of `cost` at `now_ms`, each checked in that order: 0
    /// denied, 1 allowed, or invalid. Inlined, the error kept out of line: the hot call
    /// passes no `Result` through memory.
    #[inline(always)]
    fn land(&mut self, call: u32, cost: f64, now_ms: f64, max_wait_ms: f64) -> u32 {
        let landed = request(cost, now_ms).and_then(|(cost, now)| {
            let call = match call {
                CHECK => Call::Check,
                PEEK => Call::Peek,
                _ => Call::Reserve(ticks_from_ms("maxWaitMs", max_wait_ms)?),
            };
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

/// `check` (0), `peek` (1) or `reserve` (2, within `maxWaitMs`) on the limiter `handle`
/// names: 0 denied, 1 allowed (the decision in its slots), 2 invalid input (the message
/// in its `rejection`), 3 freed. `Limiter`'s hot call, a free function: not meant to be
/// used directly.
#[wasm_bindgen]
pub fn decide(
    handle: u32,
    call: u32,
    cost: f64,
    #[wasm_bindgen(js_name = nowMs)] now_ms: f64,
    #[wasm_bindgen(js_name = maxWaitMs)] max_wait_ms: f64,
) -> u32 {
    match limiters().get_mut(handle as usize) {
        Some(Some(inner)) => inner.land(call, cost, now_ms, max_wait_ms),
        _ => FREED,
    }
}

/// The wasm half of `Limiter` and of `Throttle` (`limiter.js`): a handle on a limit and
/// the queue of call ids a throttle runs under it (one class: each export costs glue).
/// Not meant to be used directly. Times are milliseconds since the Unix epoch (fractions
/// allowed, exact to the microsecond).
#[wasm_bindgen]
#[derive(Debug)]
pub struct LimiterCore {
    handle: u32,
}

impl LimiterCore {
    /// Runs `f` on this limiter's half.
    fn with<R>(&self, f: impl FnOnce(&mut Inner) -> R) -> R {
        match limiters().get_mut(self.handle as usize) {
            Some(Some(inner)) => f(inner),
            _ => trap(),
        }
    }
}

impl Drop for LimiterCore {
    fn drop(&mut self) {
        if let Some(held) = limiters().get_mut(self.handle as usize) {
            *held = None;
        }
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
        let inner = Box::new(Inner {
            scheduler: built.map_err(|e| thrown(&e))?,
            slots: [0.0; 6],
            at: 0.0,
            rejection: String::new(),
        });
        let mut limiters = limiters();
        let free = limiters.iter().position(Option::is_none);
        let handle = free.unwrap_or(limiters.len());
        if free.is_none() {
            limiters.push(None);
        }
        limiters[handle] = Some(inner);
        // Handles stay below 2^32: each limiter takes memory.
        #[allow(clippy::cast_possible_truncation)]
        let handle = handle as u32;
        Ok(Self { handle })
    }

    /// This limiter's handle, for `decide`.
    #[wasm_bindgen(getter)]
    pub fn handle(&self) -> u32 {
        self.handle
    }

    /// Where the decisions land: six numbers in the module's memory.
    pub fn slots(&self) -> *const f64 {
        self.with(|inner| inner.slots.as_ptr())
    }

    /// Reports a cost known after the work: `adjustment` units added to what the limiter
    /// has taken (negative: given back), within its `overdraft`. Returns the units
    /// recorded; what a request of cost 0 gets after it lands in the slots. Throws on
    /// pacing and bans (they take no reports) and on an adjustment that is not whole.
    #[cfg(feature = "full")]
    pub fn report(
        &self,
        adjustment: f64,
        #[wasm_bindgen(js_name = nowMs)] now_ms: f64,
    ) -> Result<f64, JsError> {
        self.with(|inner| {
            let reported = whole("adjustment", adjustment.abs()).and_then(|units| {
                // At most 2^53 - 1: fits.
                #[allow(clippy::cast_possible_wrap)]
                let units = units as i64;
                let now = ticks_from_ms("nowMs", now_ms)?;
                let adjustment = if adjustment < 0.0 { -units } else { units };
                inner.scheduler.limit().report(now, adjustment)
            });
            let reported = reported.map_err(|e| thrown(&e))?;
            crate::units::land(&mut inner.slots, &reported.decision);
            #[allow(clippy::cast_precision_loss)] // At most 2^53 - 1: exact.
            Ok(reported.recorded as f64)
        })
    }

    /// Why the last `decide` or `push` answered invalid or refused.
    pub fn rejection(&self) -> String {
        self.with(|inner| core::mem::take(&mut inner.rejection))
    }

    /// Queues call `id` of `cost` at `nowMs`: 0 queued; 1 refused (a full queue, a cost
    /// that can never fit) and 2 invalid, each with a `rejection`.
    pub fn push(&self, id: u32, cost: f64, #[wasm_bindgen(js_name = nowMs)] now_ms: f64) -> u32 {
        self.with(|inner| {
            let pushed =
                request(cost, now_ms).map(|(cost, now)| inner.scheduler.push(id, cost, now));
            let (code, error) = match pushed {
                Ok(Ok(())) => return 0,
                Ok(Err((_, error))) => (1, error),
                Err(error) => (2, error),
            };
            inner.rejection = error.message();
            code
        })
    }

    /// What to do at `nowMs`: 0 nothing is queued, 1 run the call `at` names, 2 wait
    /// until `at`, 3 refuse the call `at` names, which can never run (the reason in
    /// `rejection`).
    pub fn next(&self, #[wasm_bindgen(js_name = nowMs)] now_ms: f64) -> u32 {
        // JS's clock always reads a valid time.
        let now = ticks_from_ms("nowMs", now_ms).unwrap_or_default();
        self.with(|inner| match inner.scheduler.next(now) {
            Next::Run(id) => {
                inner.at = f64::from(id);
                RUN
            }
            Next::WaitUntil(at) => {
                inner.at = ms_from_ticks(at);
                WAIT
            }
            Next::Refuse(id, error) => {
                inner.at = f64::from(id);
                inner.rejection = error.message();
                REFUSE
            }
            Next::Idle => IDLE,
        })
    }

    /// The call to run, or the instant to wait for, that `next` named.
    #[wasm_bindgen(getter)]
    pub fn at(&self) -> f64 {
        self.with(|inner| inner.at)
    }

    /// Takes call `id` out of the queue (aborted); whether it was waiting.
    pub fn remove(&self, id: u32) -> bool {
        self.with(|inner| inner.scheduler.remove(|&queued| queued == id).is_some())
    }

    /// What the server asked (read from its headers by `limiter.js`), each NaN when it
    /// did not: nothing runs before `resumeAtMs` (`Retry-After`), and at most
    /// `remaining` units until `untilMs` (`RateLimit`).
    pub fn observe(
        &self,
        #[wasm_bindgen(js_name = resumeAtMs)] resume_at_ms: f64,
        remaining: f64,
        #[wasm_bindgen(js_name = untilMs)] until_ms: f64,
    ) {
        // A server's figures beyond the range saturate; NaN is absent.
        let instant =
            |ms: f64| (!ms.is_nan()).then(|| ticks_from_ms("at", ms).unwrap_or(MAX_TICKS));
        self.with(|inner| {
            if let Some(at) = instant(resume_at_ms) {
                inner.scheduler.pause_until(at);
            }
            if let (Some(until), false) = (instant(until_ms), remaining.is_nan()) {
                let remaining = whole("remaining", remaining).unwrap_or(u64::MAX);
                inner.scheduler.set_budget(Budget { remaining, until });
            }
        });
    }

    /// How many calls are waiting.
    #[wasm_bindgen(getter)]
    pub fn queued(&self) -> usize {
        self.with(|inner| inner.scheduler.len())
    }

    /// The state in sluicegate's canonical encoding (empty when fresh); the same bytes
    /// the Rust hosts store.
    pub fn save(&self) -> Vec<u8> {
        self.with(|inner| inner.scheduler.limit().save())
    }

    /// Restores a state `save` returned. Throws, keeping the current state, if the bytes
    /// are not a state of this limiter.
    pub fn load(&self, bytes: &[u8]) -> Result<(), JsError> {
        self.with(|inner| inner.scheduler.limit().load(bytes).map_err(|e| thrown(&e)))
    }

    /// Forgets everything: the limiter is fresh again.
    pub fn reset(&self) {
        self.with(|inner| inner.scheduler.limit().reset());
    }
}
