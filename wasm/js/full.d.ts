// The full module (`sluicegate-wasm/full`): every rate algorithm, composites, bans,
// reports and calendar windows.
import { Limiter as ClientLimiter, Throttle as ClientThrottle } from "./limiter.js";
import type { Decision, LimiterOptions, ThrottleOptions } from "./options.js";

export { default, initSync, type InitInput, type InitOutput, type SyncInitInput } from "./sluicegate_wasm.js";
export type * from "./options.js";

/** What a report did, and the limiter's standing after it (what a cost of 0 gets). */
export interface Reported extends Decision {
  /** Units added to (or, for a refund, taken off) what the limiter has taken. */
  recorded: number;
  /** Units beyond the overdraft (or, for a refund, beyond what was taken), not recorded. */
  dropped: number;
}

/** A limiter of any rate algorithm; see the client's `Limiter`. */
export declare class Limiter extends ClientLimiter {
  /** A fresh limiter. Throws an `Error` naming the first invalid option. */
  constructor(options: LimiterOptions);
  /**
   * Reports a cost known after the work: `adjustment` units added to what the limiter
   * has taken (negative: given back), within its `overdraft`. Throws for pacing and bans
   * (they take no reports).
   */
  report(adjustment: number, nowMs?: number | null): Reported;
}

/** A throttle over a limiter of any rate algorithm; see the client's `Throttle`. */
export declare class Throttle extends ClientThrottle {
  /** A throttle over a fresh limiter. Throws an `Error` naming the first invalid option. */
  constructor(options: ThrottleOptions<LimiterOptions>);
}
