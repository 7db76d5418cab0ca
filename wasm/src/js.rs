//! The JS-facing types: newtypes over [`Limit`] and [`Scheduler`], the clock read at the
//! edge, options read from JS objects, and errors turned into thrown `Error`s.

use std::cell::RefCell;
use std::rc::{Rc, Weak};

use js_sys::{Array, Float64Array, Function, Promise, Reflect};
use sluicegate_core::{Decision, Ticks};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

use crate::error::Error;
use crate::feedback;
use crate::limit::Limit;
use crate::options::{algorithm, Fields};
use crate::scheduler::{Next, Scheduler};
use crate::units::{ms_from_ticks, ticks_from_ms, whole};

/// The options' and decisions' TypeScript types (`algorithm` spelled as the core's kinds).
#[wasm_bindgen(typescript_custom_section)]
const TYPES: &str = include_str!("../js/options.d.ts");

#[wasm_bindgen(inline_js = r#"
const origin = Date.now() - performance.now();
export function nowMs() { return origin + performance.now(); }
const slots = new Float64Array(6);
export function store(allowed, limit, remaining, retryAfterMs, resetAfterMs, delayMs) {
  slots[0] = allowed;
  slots[1] = limit;
  slots[2] = remaining;
  slots[3] = retryAfterMs;
  slots[4] = resetAfterMs;
  slots[5] = delayMs;
}
export function shared() { return { nowMs, slots }; }
"#)]
extern "C" {
    /// Milliseconds since the Unix epoch: `performance.now()`, monotonic, anchored once
    /// to `Date.now()`.
    #[wasm_bindgen(js_name = nowMs)]
    fn now_ms() -> f64;

    /// Writes a decision into the slots `limiter.js` reads (`retryAfterMs` is -1 for
    /// never): six numbers in one call, nothing allocated.
    fn store(
        allowed: bool,
        limit: f64,
        remaining: f64,
        retry_after_ms: f64,
        reset_after_ms: f64,
        delay_ms: f64,
    );

    /// `{ nowMs, slots }`: the clock and the decision slots, for `limiter.js`.
    fn shared() -> JsValue;
}

#[wasm_bindgen]
extern "C" {
    #[wasm_bindgen(js_name = setTimeout)]
    fn set_timeout(callback: &Function, ms: f64) -> JsValue;

    #[wasm_bindgen(js_name = clearTimeout)]
    fn clear_timeout(handle: &JsValue);

    type AbortSignal;

    #[wasm_bindgen(method, getter)]
    fn aborted(this: &AbortSignal) -> bool;

    #[wasm_bindgen(method, getter)]
    fn reason(this: &AbortSignal) -> JsValue;

    #[wasm_bindgen(method, js_name = addEventListener)]
    fn add_event_listener(this: &AbortSignal, kind: &str, listener: &Function);

    #[wasm_bindgen(method, js_name = removeEventListener)]
    fn remove_event_listener(this: &AbortSignal, kind: &str, listener: &Function);
}

/// The current time in ticks. `now_ms` is always a valid time, so the fallback is moot.
fn clock() -> Ticks {
    ticks_from_ms("now", now_ms()).unwrap_or_default()
}

fn cost_or_one(cost: Option<f64>) -> Result<u64, Error> {
    whole("cost", cost.unwrap_or(1.0))
}

/// Sends a decision to the slots.
fn land(decision: &Decision) {
    // Limits are at most 10^9 and times below 2^53 µs: exact as JS numbers.
    #[allow(clippy::cast_precision_loss)]
    let number = |n: u64| n as f64;
    store(
        decision.allowed,
        number(decision.limit),
        number(decision.remaining),
        decision.retry_after.map_or(-1.0, ms_from_ticks),
        ms_from_ticks(decision.reset_after),
        ms_from_ticks(decision.delay),
    );
}

/// An options object as [`Fields`]; `undefined` and `null` fields are absent.
struct JsFields(JsValue);

impl JsFields {
    fn get(&self, name: &'static str) -> Result<Option<JsValue>, Error> {
        if !self.0.is_object() {
            return Err(Error::NotAnObject);
        }
        let value =
            Reflect::get(&self.0, &JsValue::from_str(name)).map_err(|_| Error::Unreadable(name))?;
        Ok((!value.is_undefined() && !value.is_null()).then_some(value))
    }

    fn typed<T>(
        &self,
        name: &'static str,
        expected: &'static str,
        read: impl FnOnce(JsValue) -> Option<T>,
    ) -> Result<Option<T>, Error> {
        self.get(name)?
            .map(|value| read(value).ok_or(Error::WrongType { name, expected }))
            .transpose()
    }
}

impl Fields for JsFields {
    fn number(&self, name: &'static str) -> Result<Option<f64>, Error> {
        self.typed(name, "a number", |v| v.as_f64())
    }

    fn text(&self, name: &'static str) -> Result<Option<String>, Error> {
        self.typed(name, "a string", |v| v.as_string())
    }

    fn flag(&self, name: &'static str) -> Result<Option<bool>, Error> {
        self.typed(name, "a boolean", |v| v.as_bool())
    }

    fn object(&self, name: &'static str) -> Result<Option<Self>, Error> {
        self.typed(name, "an object", |v| v.is_object().then_some(Self(v)))
    }

    fn list(&self, name: &'static str) -> Result<Option<Vec<Self>>, Error> {
        self.typed(name, "an array", |v| {
            Array::is_array(&v).then(|| Array::from(&v).iter().map(Self).collect())
        })
    }

    /// Read as a `Float64Array` would: what is not an array of numbers makes no
    /// increasing times (NaN, zeros, or none), which the reader refuses.
    fn numbers(&self, name: &'static str) -> Result<Option<Vec<f64>>, Error> {
        Ok(self.get(name)?.map(|v| {
            let numbers = Float64Array::new(&v);
            (0..numbers.length())
                .map(|i| numbers.get_index(i))
                .collect()
        }))
    }
}

fn limit_from(options: &JsValue) -> Result<Limit, Error> {
    algorithm(&JsFields(options.clone())).map(Limit::new)
}

/// The wasm half of `Limiter`, the class the packages export (`limiter.js`, which
/// builds each decision object in JS): a decision lands in shared slots instead of
/// coming back as a `Result` holding an object, which costs an allocation and a table
/// slot per call, more than the decision itself. Not meant to be used directly.
///
/// `check`, `peek` and `reserve` return `false` for invalid input and keep the message
/// for [`rejection`](Self::rejection): throwing from inside the call would leave the
/// limiter borrowed. Times are milliseconds since the Unix epoch (fractions allowed,
/// exact to the microsecond).
#[wasm_bindgen]
#[derive(Debug)]
pub struct LimiterCore {
    limit: Limit,
    rejection: String,
}

impl LimiterCore {
    /// Lands an accepted decision, or keeps the rejection's message.
    fn answer(&mut self, decision: Result<Decision, Error>) -> bool {
        match decision {
            Ok(decision) => {
                land(&decision);
                true
            }
            Err(error) => {
                self.rejection = error.to_string();
                false
            }
        }
    }
}

/// A request's cost and time, checked.
fn request(cost: f64, now_ms: f64) -> Result<(u64, Ticks), Error> {
    Ok((whole("cost", cost)?, ticks_from_ms("nowMs", now_ms)?))
}

#[wasm_bindgen]
impl LimiterCore {
    /// A fresh limiter. Throws an `Error` naming the first invalid option.
    #[wasm_bindgen(constructor)]
    pub fn new(
        #[wasm_bindgen(unchecked_param_type = "LimiterOptions")] options: JsValue,
    ) -> Result<LimiterCore, JsError> {
        let limit = limit_from(&options)?;
        Ok(Self {
            limit,
            rejection: String::new(),
        })
    }

    /// Decides a request of `cost` and, if admitted, counts it.
    pub fn check(&mut self, cost: f64, #[wasm_bindgen(js_name = nowMs)] now_ms: f64) -> bool {
        let decision = request(cost, now_ms).map(|(cost, now)| self.limit.check(now, cost));
        self.answer(decision)
    }

    /// What `check` would answer, changing nothing.
    pub fn peek(&mut self, cost: f64, #[wasm_bindgen(js_name = nowMs)] now_ms: f64) -> bool {
        let decision = request(cost, now_ms).map(|(cost, now)| self.limit.peek(now, cost));
        self.answer(decision)
    }

    /// Books a slot within `maxWaitMs`: if admitted, act after `delayMs`. Buckets,
    /// pacing and composites of them only.
    pub fn reserve(
        &mut self,
        cost: f64,
        #[wasm_bindgen(js_name = maxWaitMs)] max_wait_ms: f64,
        #[wasm_bindgen(js_name = nowMs)] now_ms: f64,
    ) -> bool {
        let decision = request(cost, now_ms).and_then(|(cost, now)| {
            let max_wait = ticks_from_ms("maxWaitMs", max_wait_ms)?;
            self.limit.reserve(now, cost, max_wait)
        });
        self.answer(decision)
    }

    /// Reports a cost known after the work: `adjustment` units added to what the limiter
    /// has taken (negative: given back), within its `overdraft`. Returns the units
    /// recorded; what a request of cost 0 gets after it lands in the slots. Throws on
    /// pacing and bans (they take no reports) and on an adjustment that is not whole.
    pub fn report(
        &mut self,
        adjustment: f64,
        #[wasm_bindgen(js_name = nowMs)] now_ms: f64,
    ) -> Result<f64, JsError> {
        let units = whole("adjustment", adjustment.abs())?;
        let units = i64::try_from(units)?;
        let now = ticks_from_ms("nowMs", now_ms)?;
        let adjustment = if adjustment < 0.0 { -units } else { units };
        let reported = self.limit.report(now, adjustment)?;
        land(&reported.decision);
        #[allow(clippy::cast_precision_loss)] // At most 2^53 - 1: exact.
        Ok(reported.recorded as f64)
    }

    /// Why the last `check`, `peek` or `reserve` returned `false`.
    pub fn rejection(&mut self) -> String {
        core::mem::take(&mut self.rejection)
    }

    /// `{ nowMs, slots }`: the clock `Throttle` reads and the six slots a decision
    /// lands in (`allowed` as 1 or 0, `retryAfterMs` as -1 for never).
    pub fn shared() -> JsValue {
        shared()
    }

    /// The state in sluicegate's canonical encoding (empty when fresh); the same bytes
    /// the Rust hosts store.
    pub fn save(&self) -> Vec<u8> {
        self.limit.save()
    }

    /// Restores a state `save` returned. Throws, keeping the current state, if the bytes
    /// are not a state of this limiter.
    pub fn load(&mut self, bytes: &[u8]) -> Result<(), JsError> {
        Ok(self.limit.load(bytes)?)
    }

    /// Forgets everything: the limiter is fresh again.
    pub fn reset(&mut self) {
        self.limit.reset();
    }
}

/// A queued call and how to settle its promise.
struct Call {
    id: u64,
    task: Function,
    resolve: Function,
    reject: Function,
    abort: Option<AbortHook>,
}

/// The abort listener of a call scheduled with a signal, removed once the call settles.
struct AbortHook {
    signal: AbortSignal,
    listener: Closure<dyn FnMut()>,
}

impl Call {
    /// Runs the task and settles the promise with its result (a promise result is
    /// adopted) or the exception it threw.
    fn run(self) {
        self.detach();
        let settle = match self.task.call0(&JsValue::UNDEFINED) {
            Ok(value) => self.resolve.call1(&JsValue::UNDEFINED, &value),
            Err(thrown) => self.reject.call1(&JsValue::UNDEFINED, &thrown),
        };
        // Settling a promise cannot throw.
        drop(settle);
    }

    fn refuse(self, reason: &JsValue) {
        self.detach();
        drop(self.reject.call1(&JsValue::UNDEFINED, reason));
    }

    fn detach(&self) {
        if let Some(hook) = &self.abort {
            let listener = hook.listener.as_ref().unchecked_ref();
            hook.signal.remove_event_listener("abort", listener);
        }
    }
}

/// A pending `setTimeout`, cleared when dropped.
struct Timer {
    at: Ticks,
    handle: JsValue,
    _callback: Closure<dyn FnMut()>,
}

impl Drop for Timer {
    fn drop(&mut self) {
        clear_timeout(&self.handle);
    }
}

struct Queue {
    scheduler: Scheduler<Call>,
    timer: Option<Timer>,
    next_id: u64,
}

type Shared = Rc<RefCell<Queue>>;

/// Runs every call that may run now, then sets one timer for the next instant one may.
/// The queue is never borrowed while a task runs, so tasks may schedule more calls.
fn pump(queue: &Shared) {
    loop {
        let next = queue.borrow_mut().scheduler.next(clock());
        match next {
            Next::Run(call) => call.run(),
            Next::WaitUntil(at) => return wake_at(queue, at),
            Next::Idle => {
                queue.borrow_mut().timer = None;
                return;
            }
        }
    }
}

fn wake_at(queue: &Shared, at: Ticks) {
    if queue.borrow().timer.as_ref().is_some_and(|t| t.at == at) {
        return;
    }
    // The timer holds the queue: calls still waiting keep their throttle alive.
    let owner = Rc::clone(queue);
    let callback = Closure::<dyn FnMut()>::new(move || {
        let fired = owner.borrow_mut().timer.take();
        pump(&owner);
        drop(fired);
    });
    let wait = ms_from_ticks(at.saturating_sub(clock())).ceil();
    let handle = set_timeout(callback.as_ref().unchecked_ref(), wait);
    queue.borrow_mut().timer = Some(Timer {
        at,
        handle,
        _callback: callback,
    });
}

fn abort(queue: &Weak<RefCell<Queue>>, id: u64) {
    let Some(queue) = queue.upgrade() else {
        return;
    };
    let removed = queue.borrow_mut().scheduler.remove(|call| call.id == id);
    if let Some(call) = removed {
        let reason = call.abort.as_ref().map(|hook| hook.signal.reason());
        call.refuse(&reason.unwrap_or(JsValue::UNDEFINED));
        pump(&queue);
    }
}

/// Queues calls and runs them, in order, as the limit allows; obeys the server's
/// `Retry-After` and `RateLimit` headers.
///
/// Calls still waiting keep the throttle alive until they run.
#[wasm_bindgen]
pub struct Throttle(Shared);

impl core::fmt::Debug for Throttle {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Throttle")
            .field("queued", &self.queued())
            .finish_non_exhaustive()
    }
}

#[wasm_bindgen]
impl Throttle {
    /// A throttle over a fresh limiter. Throws an `Error` naming the first invalid
    /// option.
    #[wasm_bindgen(constructor)]
    pub fn new(
        #[wasm_bindgen(unchecked_param_type = "ThrottleOptions")] options: JsValue,
    ) -> Result<Throttle, JsError> {
        let limit = limit_from(&options)?;
        let max_queued = JsFields(options).number("maxQueued")?;
        let max_queued = whole("maxQueued", max_queued.unwrap_or(1000.0))?;
        let max_queued = usize::try_from(max_queued)
            .ok()
            .filter(|&n| n > 0)
            .ok_or(Error::MaxQueued(max_queued))?;
        Ok(Self(Rc::new(RefCell::new(Queue {
            scheduler: Scheduler::new(limit, max_queued),
            timer: None,
            next_id: 0,
        }))))
    }

    /// Runs `task` when the limit (and the server) allow, after every call scheduled
    /// before it. The promise settles with the task's result, or rejects with its
    /// exception, with the signal's reason if aborted first, or with an `Error` if the
    /// queue is full or the cost can never fit.
    #[wasm_bindgen(unchecked_return_type = "Promise<unknown>")]
    pub fn schedule(
        &self,
        #[wasm_bindgen(unchecked_param_type = "() => unknown")] task: Function,
        #[wasm_bindgen(unchecked_param_type = "ScheduleOptions")] options: Option<JsValue>,
    ) -> Result<Promise, JsError> {
        let (cost, signal) = match options.map(JsFields) {
            Some(options) => (options.number("cost")?, options.get("signal")?),
            None => (None, None),
        };
        let cost = cost_or_one(cost)?;
        let signal: Option<AbortSignal> = signal.map(JsCast::unchecked_into);

        let mut settle = None;
        let promise = Promise::new(&mut |resolve, reject| settle = Some((resolve, reject)));
        let Some((resolve, reject)) = settle else {
            return Err(JsError::new("the Promise executor did not run"));
        };
        if let Some(signal) = signal.as_ref().filter(|s| s.aborted()) {
            drop(reject.call1(&JsValue::UNDEFINED, &signal.reason()));
            return Ok(promise);
        }
        let id = {
            let mut queue = self.0.borrow_mut();
            queue.next_id += 1;
            queue.next_id
        };
        let abort = signal.map(|signal| {
            let queue = Rc::downgrade(&self.0);
            let listener = Closure::<dyn FnMut()>::new(move || abort(&queue, id));
            signal.add_event_listener("abort", listener.as_ref().unchecked_ref());
            AbortHook { signal, listener }
        });
        let call = Call {
            id,
            task,
            resolve,
            reject,
            abort,
        };
        let pushed = self.0.borrow_mut().scheduler.push(call, cost);
        match pushed {
            Ok(()) => pump(&self.0),
            Err((call, reason)) => call.refuse(&JsError::from(reason).into()),
        }
        Ok(promise)
    }

    /// Reads a server response (or its `Headers`): `Retry-After` (seconds or an HTTP
    /// date) pauses the queue until then; `RateLimit` (with `RateLimit-Policy`) caps
    /// what runs until the server's window ends. Cross-origin responses expose these
    /// headers only if the server lists them in `Access-Control-Expose-Headers`.
    pub fn observe(
        &self,
        #[wasm_bindgen(unchecked_param_type = "ResponseLike")] response: JsValue,
    ) -> Result<(), JsError> {
        let get = |target: &JsValue| {
            Reflect::get(target, &JsValue::from_str("get"))
                .ok()
                .and_then(|f| f.dyn_into::<Function>().ok())
        };
        let (headers, get) = match get(&response) {
            Some(f) => (response, f),
            None => {
                let headers = Reflect::get(&response, &JsValue::from_str("headers"))
                    .unwrap_or(JsValue::UNDEFINED);
                let f = get(&headers).ok_or_else(|| {
                    JsError::new(
                        "observe needs a fetch Response or its Headers (an object with get(name))",
                    )
                })?;
                (headers, f)
            }
        };
        let header = |name: &str| {
            get.call1(&headers, &JsValue::from_str(name))
                .ok()
                .and_then(|v| v.as_string())
        };
        let feedback = feedback::read(header, clock());
        {
            let mut queue = self.0.borrow_mut();
            if let Some(at) = feedback.resume_at {
                queue.scheduler.pause_until(at);
            }
            if let Some(budget) = feedback.budget {
                queue.scheduler.set_budget(budget);
            }
        }
        pump(&self.0);
        Ok(())
    }

    /// How many calls are waiting.
    #[wasm_bindgen(getter)]
    pub fn queued(&self) -> usize {
        self.0.borrow().scheduler.len()
    }

    /// The limiter's state, as [`LimiterCore::save`].
    pub fn save(&self) -> Vec<u8> {
        self.0.borrow_mut().scheduler.limit().save()
    }

    /// Restores a state, as [`LimiterCore::load`].
    pub fn load(&self, bytes: &[u8]) -> Result<(), JsError> {
        let loaded = self.0.borrow_mut().scheduler.limit().load(bytes);
        loaded?;
        pump(&self.0);
        Ok(())
    }
}
