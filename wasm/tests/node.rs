//! The bindings in a real JS engine (Node.js, through wasm-bindgen-test-runner): options
//! read from JS objects, decisions landing in the shared slots, errors as messages or JS
//! `Error`s, and the throttle's promises, timers and abort signals. The JS half of
//! `Limiter` (the decision objects) is tested on the built package, in `limiter.test.mjs`.
#![cfg(target_arch = "wasm32")]

use js_sys::{Date, Float64Array, Function, Promise, Reflect, JSON};
use sluicegate_core::{Algorithm, Decision, Reserve, SlidingLog, TokenBucket, MILLISECOND};
use sluicegate_wasm::{LimiterCore, Throttle};
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;
use wasm_bindgen_test::wasm_bindgen_test;

fn json(text: &str) -> JsValue {
    JSON::parse(text).expect("test JSON parses")
}

fn field(object: &JsValue, name: &str) -> JsValue {
    Reflect::get(object, &JsValue::from_str(name)).expect("field reads")
}

fn message(error: JsError) -> String {
    field(&JsValue::from(error), "message")
        .as_string()
        .unwrap_or_default()
}

/// The decision the last `check`, `peek` or `reserve` landed in the shared slots.
fn landed() -> [f64; 6] {
    let slots: Float64Array = field(&LimiterCore::shared(), "slots").unchecked_into();
    let mut out = [0.0; 6];
    slots.copy_to(&mut out);
    out
}

/// A core decision as the slots hold it.
#[allow(clippy::cast_precision_loss)]
fn slots_of(decision: &Decision) -> [f64; 6] {
    let ms = |ticks: u64| ticks as f64 / 1000.0;
    [
        f64::from(u8::from(decision.allowed)),
        decision.limit as f64,
        decision.remaining as f64,
        decision.retry_after.map_or(-1.0, ms),
        ms(decision.reset_after),
        ms(decision.delay),
    ]
}

#[wasm_bindgen_test]
fn decisions_land_in_the_slots_with_the_cores_values() {
    let mut limiter = LimiterCore::new(json(
        r#"{"algorithm":"token-bucket","capacity":10,"rate":5,"periodMs":1000}"#,
    ))
    .unwrap();
    let core = TokenBucket::new(10, 5, 1000 * MILLISECOND).unwrap();
    let mut state = None;
    for (now_ms, cost) in [
        (0.0, 4.0),
        (0.0, 7.0),
        (100.5, 1.0),
        (2000.0, 10.0),
        (2000.0, 11.0),
    ] {
        assert!(limiter.peek(cost, now_ms));
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let (now, cost_units) = ((now_ms * 1000.0) as u64, cost as u64);
        let (want, next) = core.decide(state, now, cost_units);
        assert_eq!(landed(), slots_of(&want), "peek at {now_ms} ms");
        assert!(limiter.check(cost, now_ms));
        assert_eq!(landed(), slots_of(&want), "check at {now_ms} ms");
        state = next;
    }
    // A cost that never fits lands -1 (`null` in the decision object).
    assert_eq!(landed()[3], -1.0);
    // Reservations book ahead exactly as the core does.
    let (want, _) = core.reserve(state, 2_000_000, 3, 5_000_000);
    assert!(limiter.reserve(3.0, 5000.0, 2000.0));
    assert_eq!(landed(), slots_of(&want));
}

#[wasm_bindgen_test]
fn saved_bytes_are_the_cores_encoding() {
    let mut limiter = LimiterCore::new(json(
        r#"{"algorithm":"sliding-log","limit":3,"periodMs":1000}"#,
    ))
    .unwrap();
    assert!(limiter.save().is_empty());
    assert!(limiter.check(2.0, 5.0));
    let core = SlidingLog::new(3, 1000 * MILLISECOND).unwrap();
    let (_, state) = core.decide(None, 5000, 2);
    assert_eq!(limiter.save(), core.encode_to_vec(&state.unwrap()));
}

#[wasm_bindgen_test]
fn invalid_input_is_an_error_with_a_message_never_a_trap() {
    let cases = [
        (json("null"), "options must be an object"),
        (
            json(r#"{"algorithm":"leaky"}"#),
            "unknown algorithm \"leaky\"",
        ),
        (
            json(r#"{"algorithm":"fixed-window","limit":"10","periodMs":1000}"#),
            "options.limit must be a number",
        ),
        (
            json(r#"{"algorithm":"token-bucket","capacity":1e12,"rate":1,"periodMs":1000}"#),
            "capacity must be between 1 and 1000000000",
        ),
        (
            json(r#"{"algorithm":"composite","members":{}}"#),
            "options.members must be an array",
        ),
    ];
    for (options, expected) in cases {
        let error = LimiterCore::new(options).unwrap_err();
        let got = message(error);
        assert!(
            got.contains(expected),
            "{got:?} should contain {expected:?}"
        );
    }
    let mut limiter = LimiterCore::new(json(
        r#"{"algorithm":"fixed-window","limit":2,"periodMs":1000}"#,
    ))
    .unwrap();
    let cases = [
        (-1.0, 0.0, "cost must be a whole number"),
        (f64::NAN, 0.0, "cost must be a whole number"),
        (1.5, 0.0, "got 1.5"),
        (1.0, -5.0, "nowMs must be a number of milliseconds"),
        (1.0, f64::INFINITY, "got Infinity"),
    ];
    for (cost, now_ms, expected) in cases {
        assert!(!limiter.check(cost, now_ms));
        let got = limiter.rejection();
        assert!(
            got.contains(expected),
            "{got:?} should contain {expected:?}"
        );
    }
    assert!(!limiter.reserve(1.0, 100.0, 0.0));
    assert!(limiter.rejection().contains("use check"));
    // Nothing was counted, and the limiter still decides.
    assert!(limiter.check(2.0, 0.0));
    assert_eq!(landed()[2], 0.0);
}

#[wasm_bindgen_test]
fn load_refuses_foreign_bytes_and_keeps_the_state() {
    let options = r#"{"algorithm":"leaky-bucket","capacity":3,"rate":1,"periodMs":1000}"#;
    let mut limiter = LimiterCore::new(json(options)).unwrap();
    assert!(limiter.check(3.0, 0.0));
    let saved = limiter.save();
    let mut other = LimiterCore::new(json(options)).unwrap();
    other.load(&saved).unwrap();
    assert!(other.peek(1.0, 0.0));
    assert_eq!(landed()[0], 0.0, "the loaded bucket is full");
    assert!(message(other.load(&[1, 4, 0]).unwrap_err()).starts_with("cannot load"));
    assert_eq!(other.save(), saved);
}

fn task(body: &str) -> Function {
    Function::new_no_args(body)
}

async fn settle(promise: Promise) -> Result<JsValue, JsValue> {
    JsFuture::from(promise).await
}

#[wasm_bindgen_test]
async fn scheduled_calls_run_in_order_spaced_by_the_limit() {
    let throttle = Throttle::new(json(
        r#"{"algorithm":"token-bucket","capacity":1,"rate":1,"periodMs":40}"#,
    ))
    .unwrap();
    // Before the first decision: call k is decided no sooner than k × 40 ms after it.
    let start = Date::now();
    let promises: Vec<Promise> = (0..4)
        .map(|_| throttle.schedule(task("return Date.now()"), None).unwrap())
        .collect();
    let mut times = Vec::new();
    for promise in promises {
        times.push(settle(promise).await.unwrap().as_f64().unwrap());
    }
    for (time, k) in times.iter().zip(0u32..) {
        // Timers never fire early; 2 ms for whole milliseconds and the throttle's clock.
        let due = 40.0 * f64::from(k) - 2.0;
        assert!(time - start >= due, "call {k}: {times:?} from {start}");
    }
    for pair in times.windows(2) {
        // A task may start up to 30 ms after its decision on a loaded machine; two calls
        // let through together would be 0 ms apart.
        assert!(pair[1] - pair[0] >= 10.0, "{times:?}");
    }
}

#[wasm_bindgen_test]
async fn abort_withdraws_a_waiting_call_and_a_full_queue_refuses() {
    let throttle = Throttle::new(json(
        r#"{"algorithm":"fixed-window","limit":1,"periodMs":60000,"maxQueued":2}"#,
    ))
    .unwrap();
    let first = throttle.schedule(task("return 1"), None).unwrap();
    assert_eq!(settle(first).await.unwrap().as_f64(), Some(1.0));

    let controller = js_sys::eval("new AbortController()").unwrap();
    let options = js_sys::Object::new();
    Reflect::set(&options, &"signal".into(), &field(&controller, "signal")).unwrap();
    let waiting = throttle
        .schedule(task("return 2"), Some(options.into()))
        .unwrap();
    let _queued = throttle.schedule(task("return 3"), None).unwrap();
    let full = throttle.schedule(task("return 4"), None).unwrap();
    let refused = settle(full).await.unwrap_err();
    assert!(field(&refused, "message")
        .as_string()
        .unwrap()
        .contains("queue is full"));

    let abort: Function = field(&controller, "abort").unchecked_into();
    abort.call0(&controller).unwrap();
    let reason = settle(waiting).await.unwrap_err();
    assert_eq!(
        field(&reason, "name").as_string().as_deref(),
        Some("AbortError")
    );
    assert_eq!(throttle.queued(), 1);
}

#[wasm_bindgen_test]
async fn retry_after_pauses_the_queue() {
    let throttle = Throttle::new(json(
        r#"{"algorithm":"token-bucket","capacity":100,"rate":100,"periodMs":1000}"#,
    ))
    .unwrap();
    let response =
        js_sys::eval("new Response(null, { status: 429, headers: { 'Retry-After': '1' } })")
            .unwrap();
    // Before the pause is read, so the 1 s counts from no earlier than this.
    let start = Date::now();
    throttle.observe(response).unwrap();
    let ran_at = settle(throttle.schedule(task("return Date.now()"), None).unwrap())
        .await
        .unwrap()
        .as_f64()
        .unwrap();
    assert!(
        ran_at - start >= 990.0,
        "ran {} ms after a 1 s Retry-After",
        ran_at - start
    );
    assert!(throttle.observe(JsValue::from(5)).is_err());
}

#[wasm_bindgen_test]
fn reports_record_within_the_overdraft_and_land_the_decision_after() {
    let mut limiter = LimiterCore::new(json(
        r#"{"algorithm":"fixed-window","limit":3,"periodMs":1000,"overdraft":2}"#,
    ))
    .unwrap();
    assert!(limiter.check(1.0, 0.0));
    // 9 more: 4 recorded (to the limit plus the overdraft), 5 dropped; in debt.
    assert_eq!(limiter.report(9.0, 0.5).unwrap(), 4.0);
    assert_eq!(landed()[0], 0.0);
    assert_eq!(limiter.report(-5.0, 0.5).unwrap(), 5.0);
    assert_eq!(landed()[0], 1.0);
    let error = limiter.report(1.5, 0.5).unwrap_err();
    assert!(message(error).contains("adjustment must be a whole number"));
    let mut pacing = LimiterCore::new(json(
        r#"{"algorithm":"pacing","capacity":1,"rate":1,"periodMs":1000}"#,
    ))
    .unwrap();
    assert!(message(pacing.report(1.0, 0.0).unwrap_err()).contains("take no reports"));
}
