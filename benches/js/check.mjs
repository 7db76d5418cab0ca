// sluicegate-wasm's `Limiter.check()` beside a hand-written JS token bucket, in one run.
// Both read `performance.now()` and return the same six-field decision object, so the
// difference is the boundary crossing and the exact integer math.
// Run after scripts/build-wasm.sh: `node benches/js/check.mjs`.
import { Limiter } from "../../wasm/pkg/client/node.js";

/** A plain token bucket in floating point: refill on read, as most JS limiters do. */
class JsTokenBucket {
  constructor(capacity, rate, periodMs) {
    this.capacity = capacity;
    this.perMs = rate / periodMs;
    this.tokens = capacity;
    this.last = performance.now();
  }

  check(cost = 1) {
    const now = performance.now();
    this.tokens = Math.min(this.capacity, this.tokens + (now - this.last) * this.perMs);
    this.last = now;
    const allowed = this.tokens >= cost;
    if (allowed) this.tokens -= cost;
    const missing = allowed ? 0 : cost - this.tokens;
    return {
      allowed,
      limit: this.capacity,
      remaining: Math.floor(this.tokens),
      retryAfterMs: cost > this.capacity ? null : missing / this.perMs,
      resetAfterMs: (this.capacity - this.tokens) / this.perMs,
      delayMs: 0,
    };
  }
}

// Mostly allowed: a large bucket refilled faster than the loop drains it.
const options = { capacity: 1_000_000, rate: 100_000_000, periodMs: 1000 };
const subjects = {
  sluicegate: new Limiter({ algorithm: "token-bucket", ...options }),
  js: new JsTokenBucket(options.capacity, options.rate, options.periodMs),
};

const N = 1_000_000;
let sink = 0;
function nsPerCheck(limiter) {
  const start = process.hrtime.bigint();
  for (let i = 0; i < N; i++) sink += limiter.check(1).remaining;
  return Number(process.hrtime.bigint() - start) / N;
}

// Warm up, then alternate rounds so both see the same machine; report medians.
for (const limiter of Object.values(subjects)) nsPerCheck(limiter);
const rounds = { sluicegate: [], js: [] };
for (let round = 0; round < 7; round++) {
  for (const [name, limiter] of Object.entries(subjects)) rounds[name].push(nsPerCheck(limiter));
}
const median = (xs) => xs.sort((a, b) => a - b)[xs.length >> 1];
const sluicegate = median(rounds.sluicegate);
const js = median(rounds.js);
console.log(`sluicegate-wasm check(): ${sluicegate.toFixed(1)} ns`);
console.log(`JS token bucket check(): ${js.toFixed(1)} ns`);
console.log(`ratio sluicegate / JS: ${(sluicegate / js).toFixed(2)}x (goal: at most 3x)`);
if (sink === 0) console.log("(unreachable: keeps the loop from being optimized away)");
