// sluicegate-wasm's client module beside hand-written JS, in one run: `check()` (a new
// decision object), its fast form `admit()` (fields read from a shared view), `reserve()`,
// and the throttle's per-call overhead (`schedule` of a call that runs at once). Each JS
// peer does the same work: refill on read in floating point, the same object, a
// promise per call. The floor row: what any wasm `check()` pays before deciding (the
// clock and a call into the module that finds no limiter). Run after scripts/build-wasm.sh:
// `node benches/js/check.mjs`.
import { Limiter, Throttle } from "../../wasm/pkg/client/node.js";
import { decide } from "../../wasm/pkg/client/sluicegate_wasm.js";

/** A plain token bucket in floating point: refill on read, as most JS limiters do. */
class JsTokenBucket {
  constructor(capacity, rate, periodMs) {
    this.capacity = capacity;
    this.perMs = rate / periodMs;
    this.tokens = capacity;
    this.last = performance.now();
    this.view = { allowed: false, remaining: 0 };
  }

  #refill(now) {
    this.tokens = Math.min(this.capacity, this.tokens + (now - this.last) * this.perMs);
    this.last = now;
  }

  check(cost = 1) {
    this.#refill(performance.now());
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

  /** `check` answering a boolean, the fields kept on one reused object. */
  admit(cost = 1) {
    this.#refill(performance.now());
    const allowed = this.tokens >= cost;
    if (allowed) this.tokens -= cost;
    this.view.allowed = allowed;
    this.view.remaining = Math.floor(this.tokens);
    return allowed;
  }

  /** Books `cost` within `maxWaitMs`: tokens may go negative, the delay is the debt's refill. */
  reserve(cost, maxWaitMs) {
    this.#refill(performance.now());
    const delayMs = Math.max(0, (cost - this.tokens) / this.perMs);
    const allowed = delayMs <= maxWaitMs;
    if (allowed) this.tokens -= cost;
    return {
      allowed,
      limit: this.capacity,
      remaining: Math.max(0, Math.floor(this.tokens)),
      retryAfterMs: 0,
      resetAfterMs: (this.capacity - this.tokens) / this.perMs,
      delayMs,
    };
  }
}

/** A plain throttle: a promise per call, run at once while the bucket admits it. */
class JsThrottle {
  constructor(bucket) {
    this.bucket = bucket;
    this.queue = [];
  }

  schedule(task) {
    return new Promise((resolve, reject) => {
      this.queue.push({ task, resolve, reject });
      while (this.queue.length > 0 && this.bucket.admit(1)) {
        const call = this.queue.shift();
        try {
          call.resolve(call.task());
        } catch (error) {
          call.reject(error);
        }
      }
    });
  }
}

// Mostly allowed: large buckets refilled faster than the loops drain them. A client's
// rate (a few per period) keeps the core's arithmetic in 64 bits (rate × now in µs
// below 2^64); 10^8 per second, the earlier bench's bucket, takes its 128-bit path.
const options = { capacity: 1_000_000_000, rate: 1, periodMs: 0.001 };
const wide = { capacity: 1_000_000, rate: 100_000_000, periodMs: 1000 };
const bucket = { algorithm: "token-bucket", ...options };
const ours = new Limiter(bucket);
const theirs = new JsTokenBucket(options.capacity, options.rate, options.periodMs);
const oursWide = new Limiter({ algorithm: "token-bucket", ...wide });
const theirsWide = new JsTokenBucket(wide.capacity, wide.rate, wide.periodMs);
const ourThrottle = new Throttle({ ...bucket, maxQueued: 100_000 });
const theirThrottle = new JsThrottle(new JsTokenBucket(options.capacity, options.rate, options.periodMs));

// The floor: `decide` on a handle no limiter has finds nothing and returns.
const origin = Date.now() - performance.now();

const N = 1_000_000;
let sink = 0;
const task = () => 1;
const rows = {
  check: [() => (sink += ours.check(1).remaining), () => (sink += theirs.check(1).remaining)],
  "check (10^8 per second)": [
    () => (sink += oursWide.check(1).remaining),
    () => (sink += theirsWide.check(1).remaining),
  ],
  "admit (fast form)": [
    () => (sink += ours.admit(1) ? ours.last.remaining : 0),
    () => (sink += theirs.admit(1) ? theirs.view.remaining : 0),
  ],
  reserve: [() => (sink += ours.reserve(1, 1000).delayMs), () => (sink += theirs.reserve(1, 1000).delayMs)],
  "throttle.schedule": [() => ourThrottle.schedule(task), () => theirThrottle.schedule(task)],
  "floor: the clock and an empty call, beside JS's check": [
    () => (sink += decide(-1, 0, 1, origin + performance.now(), 0)),
    () => (sink += theirs.check(1).remaining),
  ],
};

/** CPU nanoseconds per call of `body`, over `n` calls: time the process spent running
 * (on a shared machine, waiting for a core shows in wall time, not here). */
function nsPer(body, n) {
  const start = process.cpuUsage();
  for (let i = 0; i < n; i++) body();
  const { user, system } = process.cpuUsage(start);
  return ((user + system) * 1000) / n;
}

// The fastest round: other processes and the collector only add time.
const fastest = (xs) => Math.min(...xs);
console.log("| call | sluicegate-wasm | plain JS | ratio |\n|---|---|---|---|");
for (const [name, [sluicegate, js]] of Object.entries(rows)) {
  // The throttle's promises are settled between rounds, so fewer calls per round.
  const n = name.startsWith("throttle") ? N / 20 : N;
  nsPer(sluicegate, n);
  nsPer(js, n);
  const times = { sluicegate: [], js: [] };
  // Alternate rounds so both see the same machine.
  for (let round = 0; round < 7; round++) {
    times.sluicegate.push(nsPer(sluicegate, n));
    times.js.push(nsPer(js, n));
    await new Promise((settled) => setImmediate(settled));
  }
  const [a, b] = [fastest(times.sluicegate), fastest(times.js)];
  console.log(`| ${name} | ${a.toFixed(1)} ns | ${b.toFixed(1)} ns | ${(a / b).toFixed(2)}x |`);
}
if (sink === 0) console.log("(unreachable: keeps the loops from being optimized away)");
