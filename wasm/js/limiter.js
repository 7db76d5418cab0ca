// `Limiter`, the class the packages export: the wasm `LimiterCore` decides and writes the
// decision into shared slots, and this builds the plain object in JS. Returning the
// object from wasm would cost an allocation and a table slot per call, more than the
// decision itself. Copied verbatim into both packages by scripts/build-wasm.sh.
import { LimiterCore } from "./sluicegate_wasm.js";

/** `{ nowMs, slots }` from the module, read once the module is initialized. */
let shared;

/** The decision the last call wrote into the slots, as a plain object. */
function decision() {
  const slots = shared.slots;
  return {
    allowed: slots[0] === 1,
    limit: slots[1],
    remaining: slots[2],
    retryAfterMs: slots[3] < 0 ? null : slots[3],
    resetAfterMs: slots[4],
    delayMs: slots[5],
  };
}

/**
 * A limit this client keeps for itself: `check` before acting, `reserve` to book a slot,
 * `save` / `load` to keep the state across page loads. Times are milliseconds since the
 * Unix epoch (fractions allowed, exact to the microsecond); leave `nowMs` out to read
 * `performance.now()`. Invalid input throws an `Error` with a message.
 */
export class Limiter {
  #core;

  /** A fresh limiter. Throws an `Error` naming the first invalid option. */
  constructor(options) {
    this.#core = new LimiterCore(options);
    shared ??= LimiterCore.shared();
  }

  /** Decides a request of `cost` (default 1) and, if admitted, counts it. */
  check(cost, nowMs) {
    return this.#answer(this.#core.check(cost ?? 1, nowMs ?? shared.nowMs()));
  }

  /** What `check` would answer, changing nothing. */
  peek(cost, nowMs) {
    return this.#answer(this.#core.peek(cost ?? 1, nowMs ?? shared.nowMs()));
  }

  /**
   * Books a slot within `maxWaitMs`: if admitted, act after `delayMs`. Buckets, pacing
   * and composites of them only; throws for windows and bans.
   */
  reserve(cost, maxWaitMs, nowMs) {
    return this.#answer(this.#core.reserve(cost, maxWaitMs, nowMs ?? shared.nowMs()));
  }

  /**
   * Reports a cost known after the work: `adjustment` units added to what the limiter
   * has taken (negative: given back), within its `overdraft`. Returns what it `recorded`
   * and `dropped` (beyond the bound) and the standing after it, what a request of cost 0
   * gets: not allowed while in debt. Throws for pacing and bans (they take no reports).
   */
  report(adjustment, nowMs) {
    const recorded = this.#core.report(adjustment, nowMs ?? shared.nowMs());
    return { recorded, dropped: Math.abs(adjustment) - recorded, ...decision() };
  }

  /** The state in sluicegate's canonical encoding (empty when fresh). */
  save() {
    return this.#core.save();
  }

  /** Restores a state `save` returned; throws, keeping the state, for foreign bytes. */
  load(bytes) {
    this.#core.load(bytes);
  }

  /** Forgets everything: the limiter is fresh again. */
  reset() {
    this.#core.reset();
  }

  /** Frees the wasm memory now instead of when the limiter is garbage collected. */
  free() {
    this.#core.free();
  }

  #answer(decided) {
    if (!decided) throw new Error(this.#core.rejection());
    return decision();
  }
}
if (Symbol.dispose) Limiter.prototype[Symbol.dispose] = Limiter.prototype.free;
