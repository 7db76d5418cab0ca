import type { ClientOptions, Decision, ResponseLike, ScheduleOptions, ThrottleOptions } from "./options.js";

/**
 * A limit this client keeps for itself: `check` before acting, `reserve` to book a slot,
 * `save` / `load` to keep the state across page loads. Times are milliseconds since the
 * Unix epoch (fractions allowed, exact to the microsecond); leave `nowMs` out to read
 * `performance.now()`. Invalid input throws an `Error` with a message.
 */
export declare class Limiter {
  /** A fresh limiter. Throws an `Error` naming the first invalid option. */
  constructor(options: ClientOptions);
  /** Decides a request of `cost` (default 1) and, if admitted, counts it. */
  check(cost?: number | null, nowMs?: number | null): Decision;
  /**
   * `check`'s fast form: whether the request is admitted, the decision's fields in
   * `last` (read from the module's memory, valid until this limiter's next call).
   */
  admit(cost?: number | null, nowMs?: number | null): boolean;
  /** The fields of the last decision, for `admit`: nothing allocated per call. */
  readonly last: Readonly<Decision>;
  /** What `check` would answer, changing nothing. */
  peek(cost?: number | null, nowMs?: number | null): Decision;
  /**
   * Books a slot within `maxWaitMs`: if admitted, act after `delayMs`. Buckets, pacing
   * and composites of them only; throws for windows and bans.
   */
  reserve(cost: number, maxWaitMs: number, nowMs?: number | null): Decision;
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

/**
 * Queues calls and runs them, in order, as the limit allows; obeys the server's
 * `Retry-After` and `RateLimit` headers. Calls still waiting keep it alive.
 */
export declare class Throttle {
  /** A throttle over a fresh limiter. Throws an `Error` naming the first invalid option. */
  constructor(options: ThrottleOptions);
  /**
   * Runs `task` when the limit (and the server) allow, after every call scheduled before
   * it. The promise settles with the task's result, or rejects with its exception, with
   * the signal's reason if aborted first, or with an `Error` if the queue is full or the
   * cost can never fit. An invalid cost throws.
   */
  schedule<T>(task: () => T | PromiseLike<T>, options?: ScheduleOptions): Promise<Awaited<T>>;
  /**
   * Reads a server response (or its `Headers`): `Retry-After` pauses the queue;
   * `RateLimit` (with `RateLimit-Policy`) caps what runs until the server's window ends.
   */
  observe(response: ResponseLike): void;
  /** How many calls are waiting. */
  readonly queued: number;
  /** The limiter's state, as `Limiter.save`. */
  save(): Uint8Array;
  /** Restores a state, as `Limiter.load`. */
  load(bytes: Uint8Array | number[]): void;
}
