// The throttle's JS half (wasm/js/limiter.js) on the real clock, and the server's
// pushback read from headers (wasm/js/feedback.js). Run after scripts/build-wasm.sh:
// `node --test wasm/tests/throttle.test.mjs`. Timing bounds follow docs/tests.md: "not
// before" exact on the throttle's own clock (performance.now()), "by" seconds late.
import assert from "node:assert/strict";
import { test } from "node:test";

import { Throttle } from "../pkg/client/node.js";
import { Throttle as FullThrottle } from "../pkg/full/node.js";
import { feedback, httpDate } from "../pkg/client/feedback.js";

const bucket = { algorithm: "token-bucket", capacity: 1, rate: 1, periodMs: 100 };

test("calls run in order, each when the limit admits it", async () => {
  const throttle = new Throttle(bucket);
  const start = performance.now();
  const runs = await Promise.all([0, 1, 2].map((k) => throttle.schedule(() => [k, performance.now() - start])));
  assert.deepEqual(runs.map(([k]) => k), [0, 1, 2]);
  runs.forEach(([k, at]) => {
    // Not before its token is back (counted from before the first decision).
    assert.ok(at >= k * 100, `call ${k} at ${at} ms`);
  });
  // Seconds late at most on a loaded machine; a refill at a tenth of the rate takes 2 s.
  assert.ok(runs[2][1] < 1800, `the last at ${runs[2][1]} ms`);
  assert.equal(throttle.queued, 0);
});

test("a task's exception rejects its call; a promise is adopted", async () => {
  const throttle = new Throttle({ ...bucket, capacity: 5 });
  await assert.rejects(throttle.schedule(() => { throw new TypeError("boom"); }), TypeError);
  assert.equal(await throttle.schedule(async () => "later"), "later");
});

test("abort withdraws a waiting call; a full queue and a cost that never fits refuse", async () => {
  const throttle = new Throttle({ ...bucket, maxQueued: 2 });
  const controller = new AbortController();
  let ran = 0;
  const first = throttle.schedule(() => ran++);
  const waiting = throttle.schedule(() => ran++, { signal: controller.signal });
  const last = throttle.schedule(() => ran++);
  await assert.rejects(throttle.schedule(() => ran++), /the throttle's queue is full: 2 calls are waiting/);
  controller.abort(new Error("withdrawn"));
  await assert.rejects(waiting, /withdrawn/);
  await Promise.all([first, last]);
  assert.equal(throttle.queued, 0);
  await assert.rejects(throttle.schedule(() => ran++, { cost: 2 }), /a call of cost 2 can never fit this limit/);
  await assert.rejects(throttle.schedule(() => ran++, { signal: AbortSignal.abort() }), { name: "AbortError" });
  assert.throws(() => throttle.schedule(() => ran++, { cost: 0.5 }), /cost must be a whole number/);
  assert.throws(() => new Throttle({ ...bucket, maxQueued: 0 }), /maxQueued must be at least 1/);
  assert.throws(() => new Throttle({ ...bucket, maxQueued: "2" }), /options.maxQueued must be a number/);
  assert.equal(ran, 2, "the withdrawn and refused calls never ran");
});

test("a calendar window on the caller's boundaries runs its calls", async () => {
  // A day around now: its periods do not hold the epoch, where a cost once was checked.
  const now = Date.now();
  const boundariesMs = [now - 43_200_000, now + 43_200_000];
  const throttle = new FullThrottle({ algorithm: "calendar-window", limit: 2, calendar: "day", boundariesMs });
  assert.deepEqual(await Promise.all([throttle.schedule(() => 1), throttle.schedule(() => 2)]), [1, 2]);
});

test("a call waiting when a calendar window's last period ends is refused, not held", async () => {
  // The last period ends 50 ms from now: the third call waits for it, then can never run.
  const now = Date.now();
  const boundariesMs = [now - 1000, now + 50];
  const throttle = new FullThrottle({ algorithm: "calendar-window", limit: 2, calendar: "day", boundariesMs });
  const calls = [1, 2, 3].map((n) => throttle.schedule(() => n));
  assert.deepEqual(await Promise.all(calls.slice(0, 2)), [1, 2]);
  await assert.rejects(calls[2], /a call of cost 1 can never fit this limit/);
  assert.equal(throttle.queued, 0);
  await assert.rejects(throttle.schedule(() => 4), /can never fit/);
});

test("Retry-After pauses the queue for as long as the server asks", async () => {
  const throttle = new Throttle({ ...bucket, capacity: 5 });
  const before = performance.now();
  throttle.observe({ headers: new Headers({ "Retry-After": "1" }) });
  const ranAt = await throttle.schedule(() => performance.now());
  // Counted from before the header was read: exact.
  assert.ok(ranAt - before >= 1000, `ran ${ranAt - before} ms after`);
  // Seconds late at most; a Retry-After read as minutes holds it a minute.
  assert.ok(ranAt - before < 5000, `ran ${ranAt - before} ms after`);
  assert.throws(() => throttle.observe({}), /observe needs a fetch Response or its Headers/);
});

const NOW = 1_700_000_000_000;
const headers = (pairs) => (name) => pairs.find(([n]) => n.toLowerCase() === name)?.[1];

test("Retry-After in seconds and as a date; anything else is no pause", () => {
  const pause = (value) => feedback(headers([["Retry-After", value]]), NOW)[0];
  assert.equal(pause("1"), NOW + 1000);
  assert.equal(pause(" 120 "), NOW + 120_000);
  assert.ok(Number.isNaN(pause("0")));
  assert.equal(pause("Tue, 14 Nov 2023 22:15:00 GMT"), 1_700_000_100_000);
  for (const ignored of [
    "Sun, 06 Nov 1994 08:49:37 GMT", "soon", "-5", "Tue, 14 Nov 2023 22:15:00 UTC",
    "Tuesday, 14-Nov-23 22:15:00 GMT", "Tue, 31 Nov 2023 22:15:00 GMT", "Tue, 14 Nov 2023 24:15:00 GMT",
  ]) {
    assert.ok(Number.isNaN(pause(ignored)), ignored);
  }
  assert.equal(httpDate("Sun, 06 Nov 1994 08:49:37 GMT"), 784_111_777_000);
});

test("RateLimit headers of every draft; the tightest grant binds", () => {
  const budget = (pairs) => feedback(headers(pairs), NOW).slice(1);
  const grant = (remaining, seconds) => [remaining, NOW + seconds * 1000];
  assert.deepEqual(budget([["RateLimit", '"default";r=50;t=30']]), grant(50, 30));
  assert.deepEqual(budget([["RateLimit", '"hour";r=500;t=3000, "minute";r=0;t=12']]), grant(0, 12));
  assert.deepEqual(
    budget([["RateLimit", '"burst";r=3'], ["RateLimit-Policy", '"burst";q=100;w=60, "day";q=1000;w=86400']]),
    grant(3, 60),
  );
  assert.deepEqual(budget([["RateLimit", '"burst";r=3']]), [NaN, NaN]);
  assert.deepEqual(budget([["RateLimit", "limit=100, remaining=7, reset=5"]]), grant(7, 5));
  assert.deepEqual(budget([["RateLimit-Remaining", "2"], ["RateLimit-Reset", "9"]]), grant(2, 9));
  assert.deepEqual(budget([["RateLimit", "nonsense;;==,"]]), [NaN, NaN]);
  assert.deepEqual(budget([]), [NaN, NaN]);
});

test("HTTP dates read back the instant they name, and no header text throws", () => {
  // Written by the engine's own formatter, which shares no code with the reader.
  for (let i = 0; i < 2000; i++) {
    const seconds = Math.floor(Math.random() * 253_402_300_800);
    const text = new Date(seconds * 1000).toUTCString();
    assert.equal(httpDate(text), seconds * 1000, text);
  }
  const alphabet = 'abz09";=, -:GMTJanSunr';
  const random = (n) => Array.from({ length: Math.floor(Math.random() * n) }, () => alphabet[Math.floor(Math.random() * alphabet.length)]).join("");
  for (let i = 0; i < 2000; i++) {
    feedback(headers([["Retry-After", random(40)], ["RateLimit", random(60)], ["RateLimit-Policy", random(60)]]), NOW);
  }
});
