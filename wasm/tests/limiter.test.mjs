// The package's `Limiter` (wasm/js/limiter.js over the module's LimiterCore), as users
// load it: the client and full modules, their Node.js and browser entries. Run after
// scripts/build-wasm.sh: `node --test wasm/tests/limiter.test.mjs`.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { test } from "node:test";

import { Limiter, Throttle } from "../pkg/client/node.js";
import * as full from "../pkg/full/node.js";
import * as web from "../pkg/client/index.js";

const bucket = { algorithm: "token-bucket", capacity: 3, rate: 1, periodMs: 1000 };
const window = { algorithm: "fixed-window", limit: 2, periodMs: 1000 };

test("decisions are plain objects with the six fields, in order", () => {
  const limiter = new Limiter(bucket);
  const admitted = limiter.check(1, 0);
  assert.deepEqual(Object.keys(admitted), [
    "allowed", "limit", "remaining", "retryAfterMs", "resetAfterMs", "delayMs",
  ]);
  assert.equal(Object.getPrototypeOf(admitted), Object.prototype);
  assert.deepEqual(admitted, {
    allowed: true, limit: 3, remaining: 2, retryAfterMs: 0, resetAfterMs: 1000, delayMs: 0,
  });
  // Three more do not fit until one more unit has refilled, a second later.
  assert.deepEqual(limiter.check(3, 0), {
    allowed: false, limit: 3, remaining: 2, retryAfterMs: 1000, resetAfterMs: 1000, delayMs: 0,
  });
  // More than the capacity never fits: null, not a number.
  assert.equal(limiter.check(4, 0).retryAfterMs, null);
  // Fractions of a millisecond are exact to the microsecond.
  assert.deepEqual(limiter.peek(1, 500.25), {
    allowed: true, limit: 3, remaining: 1, retryAfterMs: 0, resetAfterMs: 1499.75, delayMs: 0,
  });
  // Each call returns its own object.
  assert.notEqual(limiter.peek(1, 0), limiter.peek(1, 0));
});

test("a calendar window decides in the periods between its boundaries", () => {
  // Berlin's days around the autumn change of 2026: 24 hours, then 25.
  const boundariesMs = [Date.UTC(2026, 9, 23, 22), Date.UTC(2026, 9, 24, 22), Date.UTC(2026, 9, 25, 23)];
  const limiter = new full.Limiter({ algorithm: "calendar-window", limit: 1, calendar: "day", timeZone: "Europe/Berlin", boundariesMs });
  assert.equal(limiter.check(1, boundariesMs[1] - 1).resetAfterMs, 1);
  assert.deepEqual(limiter.check(1, boundariesMs[1]), {
    allowed: true, limit: 1, remaining: 0, retryAfterMs: 0, resetAfterMs: 25 * 3_600_000, delayMs: 0,
  });
  assert.equal(limiter.check(1, boundariesMs[2] - 1).retryAfterMs, 1);
  // Beyond the last boundary there is no period: refused, never counted.
  assert.equal(limiter.check(1, boundariesMs[2]).retryAfterMs, null);
  assert.throws(() => new full.Limiter({ algorithm: "calendar-window", limit: 1, calendar: "day" }), /boundariesMs is required/);
  assert.throws(() => new Limiter({ algorithm: "calendar-window", limit: 1, calendar: "day", boundariesMs }), /sluicegate-wasm\/full/);
});

test("cost defaults to 1 and time to the clock", () => {
  const limiter = new Limiter(bucket);
  const first = limiter.check();
  assert.equal(first.remaining, 2);
  assert.ok(first.resetAfterMs > 900 && first.resetAfterMs <= 1000, `${first.resetAfterMs}`);
  assert.equal(limiter.peek(null, undefined).remaining, 1, "null and undefined are absent");
  assert.equal(limiter.check(2).allowed, true);
  assert.equal(limiter.check().allowed, false);
});

test("reserve books ahead on buckets and throws on windows", () => {
  const limiter = new Limiter(bucket);
  limiter.check(3, 0);
  assert.deepEqual(limiter.reserve(1, 2000, 0), {
    allowed: true, limit: 3, remaining: 0, retryAfterMs: 0, resetAfterMs: 4000, delayMs: 1000,
  });
  assert.equal(limiter.reserve(1, 500, 0).allowed, false);
  assert.throws(() => new Limiter(window).reserve(1, 100, 0), /windows and bans cannot book ahead/);
});

test("report charges a cost known after the work, within the overdraft, and refunds", () => {
  const limiter = new full.Limiter({ ...window, limit: 3, overdraft: 2 });
  assert.equal(limiter.check(1, 0).remaining, 2);
  // 9 more after the work: 4 recorded (to the limit plus the overdraft), 5 dropped; in debt.
  const charged = limiter.report(9, 10);
  assert.deepEqual(Object.keys(charged), [
    "recorded", "dropped", "allowed", "limit", "remaining", "retryAfterMs", "resetAfterMs", "delayMs",
  ]);
  assert.deepEqual(charged, {
    recorded: 4, dropped: 5, allowed: false, limit: 3, remaining: 0, retryAfterMs: 990, resetAfterMs: 990, delayMs: 0,
  });
  assert.equal(limiter.check(1, 10).allowed, false, "the debt denies until the window ends");
  // A refund gives back what was taken, no more: 5 taken, 7 asked back; fresh again.
  assert.deepEqual(limiter.report(-7, 20), {
    recorded: 5, dropped: 2, allowed: true, limit: 3, remaining: 3, retryAfterMs: 0, resetAfterMs: 0, delayMs: 0,
  });
  // Time defaults to the clock; pacing takes no reports; a fraction is refused.
  assert.equal(new full.Limiter(bucket).report(1).recorded, 1);
  assert.throws(() => new Limiter(bucket).report(1), /report needs the full module/);
  assert.throws(() => new Limiter({ ...window, overdraft: 1 }), /overdraft needs the full module/);
  const pacing = new full.Limiter({ ...bucket, algorithm: "pacing" });
  assert.throws(() => pacing.report(1, 0), (e) => e instanceof Error && /take no reports/.test(e.message));
  assert.throws(() => limiter.report(0.5, 20), /adjustment must be a whole number/);
  assert.equal(limiter.check(3, 20).allowed, true, "a refused report changes nothing");
});

test("invalid input throws an Error with a message, counts nothing, and leaves the limiter usable", () => {
  const limiter = new Limiter(window);
  for (const [attempt, message] of [
    [() => limiter.check(0.5, 0), /cost must be a whole number from 0 to 2\^53 - 1, got 0.5/],
    [() => limiter.check(-1, 0), /cost must be a whole number/],
    [() => limiter.check("many", 0), /got NaN/],
    [() => limiter.peek(1, -5), /nowMs must be a number of milliseconds/],
    [() => limiter.reserve(1, Number.NaN, 0), /maxWaitMs must be a number of milliseconds/],
    [() => new Limiter({ ...window, limit: 0.5 }), /limit must be a whole number/],
    [() => new Limiter("fixed-window"), /options must be an object/],
  ]) {
    assert.throws(attempt, (error) => error instanceof Error && message.test(error.message));
  }
  assert.equal(limiter.check(2, 0).allowed, true, "nothing was counted");
  assert.equal(limiter.check(1, 0).allowed, false);
});

test("save and load carry the state; foreign bytes throw and keep it", () => {
  const limiter = new Limiter(bucket);
  limiter.check(3, 0);
  const saved = limiter.save();
  assert.ok(saved instanceof Uint8Array && saved.length > 0);
  const reloaded = new Limiter(bucket);
  reloaded.load(saved);
  assert.equal(reloaded.peek(1, 0).allowed, false);
  assert.throws(() => reloaded.load(new Uint8Array([1, 4, 0])), /cannot load the saved state/);
  assert.deepEqual(reloaded.save(), saved);
  reloaded.reset();
  assert.equal(reloaded.save().length, 0);
  assert.equal(reloaded.peek(3, 0).allowed, true);
  reloaded[Symbol.dispose]();
  assert.throws(() => reloaded.check(1, 0), /this limiter was freed/);
  assert.throws(() => reloaded.admit(1, 0), /this limiter was freed/);
  // Its handle is not another limiter's, whichever is made after it.
  const next = new Limiter(bucket);
  assert.throws(() => reloaded.peek(1, 0), /this limiter was freed/);
  assert.equal(next.check(3, 0).allowed, true);
});

test("require() loads the Node.js entries too", () => {
  const require = createRequire(import.meta.url);
  assert.equal(require("../pkg/client/node.js").Limiter, Limiter);
  assert.equal(require("../pkg/full/node.js").Throttle, full.Throttle);
});

test("the browser entry decides the same once initialized", () => {
  const wasm = new URL("../pkg/client/sluicegate_wasm_bg.wasm", import.meta.url);
  web.initSync({ module: readFileSync(wasm) });
  const limiter = new web.Limiter(bucket);
  assert.deepEqual(limiter.check(1, 0), new Limiter(bucket).check(1, 0));
  assert.equal(typeof web.Throttle, "function");
});

test("decisions read right after the module's memory grew", () => {
  const limiter = new Limiter(bucket);
  assert.equal(limiter.check(1, 0).remaining, 2);
  // Eight megabytes copied in grow the memory (its buffer detached), whatever `load` says.
  try { limiter.load(new Uint8Array(8 << 20).fill(7)); } catch { /* foreign bytes */ }
  assert.deepEqual(limiter.check(1, 0), {
    allowed: true, limit: 3, remaining: 1, retryAfterMs: 0, resetAfterMs: 2000, delayMs: 0,
  });
  assert.equal(limiter.admit(1, 0), true);
  assert.equal(limiter.last.remaining, 0);
});

test("times round to the nearest microsecond, half up", () => {
  const limiter = new Limiter({ algorithm: "token-bucket", capacity: 1, rate: 1, periodMs: 1 });
  assert.equal(limiter.check(1, 0).allowed, true);
  // 0.0005 ms is half a microsecond: it rounds to 1 µs, a thousandth of the refill.
  assert.equal(limiter.peek(1, 0.0005).retryAfterMs, 0.999);
  assert.equal(limiter.peek(1, 0.00049).retryAfterMs, 1);
});
