import type { Decision, LimiterOptions } from "./sluicegate_wasm.js";

/** What a report did, and the limiter's standing after it (what a cost of 0 gets). */
export interface Reported extends Decision {
  /** Units added to (or, for a refund, taken off) what the limiter has taken. */
  recorded: number;
  /** Units beyond the overdraft (or, for a refund, beyond what was taken), not recorded. */
  dropped: number;
}

/**
 * A limit this client keeps for itself: `check` before acting, `reserve` to book a slot,
 * `save` / `load` to keep the state across page loads. Times are milliseconds since the
 * Unix epoch (fractions allowed, exact to the microsecond); leave `nowMs` out to read
 * `performance.now()`. Invalid input throws an `Error` with a message.
 */
export declare class Limiter {
  /** A fresh limiter. Throws an `Error` naming the first invalid option. */
  constructor(options: LimiterOptions);
  /** Decides a request of `cost` (default 1) and, if admitted, counts it. */
  check(cost?: number | null, nowMs?: number | null): Decision;
  /** What `check` would answer, changing nothing. */
  peek(cost?: number | null, nowMs?: number | null): Decision;
  /**
   * Books a slot within `maxWaitMs`: if admitted, act after `delayMs`. Buckets, pacing
   * and composites of them only; throws for windows and bans.
   */
  reserve(cost: number, maxWaitMs: number, nowMs?: number | null): Decision;
  /**
   * Reports a cost known after the work: `adjustment` units added to what the limiter
   * has taken (negative: given back), within its `overdraft`. Throws for pacing and bans
   * (they take no reports).
   */
  report(adjustment: number, nowMs?: number | null): Reported;
  /** The state in sluicegate's canonical encoding (empty when fresh). */
  save(): Uint8Array;
  /** Restores a state `save` returned; throws, keeping the state, for foreign bytes. */
  load(bytes: Uint8Array | number[]): void;
  /** Forgets everything: the limiter is fresh again. */
  reset(): void;
  /** Frees the wasm memory now instead of when the limiter is garbage collected. */
  free(): void;
  [Symbol.dispose](): void;
}
