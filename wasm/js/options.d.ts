/** A decision: whether the request may proceed, and what to tell or wait. */
export interface Decision {
  allowed: boolean;
  /** The most cost the limit admits at once from a fresh state. */
  limit: number;
  /** Whole units still admissible right now. */
  remaining: number;
  /** Milliseconds until this request would be admitted; 0 when admitted, null if never. */
  retryAfterMs: number | null;
  /** Milliseconds until the limit is fresh again. */
  resetAfterMs: number;
  /** Milliseconds an admitted caller waits before acting (pacing, reservations). */
  delayMs: number;
}

/** Bans a caller whose denied cost within `windowMs` exceeds `threshold`. */
export interface BanOptions { threshold: number; windowMs: number; durationMs: number }

/** At most `limit` per `periodMs`. `overdraft` and `ban`: the full module only. */
export interface WindowOptions {
  algorithm: "fixed-window" | "sliding-log" | "sliding-counter";
  limit: number;
  periodMs: number;
  /** Fixed window only: count denied cost too. */
  countDenied?: boolean;
  /** The most a reported cost may take the limiter beyond its limit (default 0). */
  overdraft?: number;
  ban?: BanOptions;
}

/** `capacity` at once, `rate` per `periodMs` in the long run. `overdraft` and `ban`: the
 * full module only. */
export interface BucketOptions {
  /** `"leaky-pacing"` is the old name of `"pacing"`, still read. */
  algorithm: "token-bucket" | "leaky-bucket" | "pacing" | "leaky-pacing";
  capacity: number;
  rate: number;
  periodMs: number;
  /** Token and leaky buckets: the most a reported cost may take them into debt. */
  overdraft?: number;
  ban?: BanOptions;
}

/** The full module: at most `limit` per calendar day, ISO week or month in `timeZone` (IANA, default
 * UTC). The periods are those between `boundariesMs`, else the zone's from the time-zone
 * database of a build with the `calendar` feature. */
export interface CalendarWindowOptions {
  algorithm: "calendar-window";
  limit: number;
  calendar: "day" | "week" | "month";
  timeZone?: string;
  /** The periods' boundaries, ms since the epoch, increasing (each period runs from one
   * to the next, at most 366 days): computed by the caller, say with `Intl.DateTimeFormat`.
   * Outside them the limiter refuses (denies, as a cost that never fits). Required
   * without the `calendar` feature. */
  boundariesMs?: number[];
  overdraft?: number;
  ban?: BanOptions;
}

/** The full module: several limits at once, admitted only if every member admits. */
export interface CompositeOptions {
  algorithm: "composite";
  members: LimiterOptions[];
  ban?: BanOptions;
}

/** What the client module (`sluicegate-wasm`) runs: windows, buckets and pacing. */
export type ClientOptions =
  | Omit<WindowOptions, "overdraft" | "ban">
  | Omit<BucketOptions, "overdraft" | "ban">;

/** What the full module (`sluicegate-wasm/full`) runs: every rate algorithm. */
export type LimiterOptions = WindowOptions | BucketOptions | CompositeOptions | CalendarWindowOptions;

/** A limiter's options and the most calls that may wait (default 1000). */
export type ThrottleOptions<Options = ClientOptions> = Options & { maxQueued?: number };

/** A call's cost (default 1) and a signal that withdraws it. */
export interface ScheduleOptions { cost?: number; signal?: AbortSignal }

/** A fetch `Response`, or anything with its `headers.get` (or the `Headers` alone). */
export type ResponseLike = { headers: { get(name: string): string | null } } | { get(name: string): string | null };
