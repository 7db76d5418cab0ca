// The preview: synthetic traffic offered to a policy decided by the wasm core, counted
// in round time bins, as `sluicegate simulate` does (same traffic generators, same bins).
// A calendar window's preview runs from today in the browser's zone instead, binned by
// its days there (the CLI's starts at the epoch: its axis shows no dates).
// The `Limiter` class is passed in, so Node.js tests run this with the Node.js package.

import { calendarBoundaries } from "./calendar.js";
import { human, inCalendar, limiterOptions } from "./policy.js";

const MS = 1_000;
const S = 1_000_000;
const MIN = 60 * S;
const H = 60 * MIN;
const D = 24 * H;

/** Durations a bin or an axis step may take: round in the unit they are read in. */
export const ROUND = [
  1, 2, 5, 10, 20, 50, 100, 200, 500, MS, 2 * MS, 5 * MS, 10 * MS, 20 * MS, 50 * MS, 100 * MS,
  200 * MS, 500 * MS, S, 2 * S, 5 * S, 10 * S, 15 * S, 30 * S, MIN, 2 * MIN, 5 * MIN, 10 * MIN,
  15 * MIN, 30 * MIN, H, 2 * H, 3 * H, 6 * H, 12 * H, D, 2 * D, 7 * D, 14 * D, 30 * D, 60 * D,
  180 * D, 365 * D,
];

/** The most bins a chart draws. */
const MAX_BINS = 120;

/** The most requests a preview decides, so a typo in the rate cannot hang the page. */
export const MAX_OFFERED = 200_000;

/**
 * The width of a bin (the CLI's rule): a round duration that fits the period, so steady
 * traffic lands evenly in every bin; whole periods for runs of ten periods or more.
 */
export function binWidth(duration, period) {
  period = Math.max(period, 1);
  const fits = (bin) => bin > 0 && Math.ceil(duration / bin) <= MAX_BINS;
  const multiples = Array.from({ length: 19 }, (_, k) => period * [1, 2, 5][k % 3] * 10 ** Math.floor(k / 3));
  const candidates =
    duration / period >= 10
      ? [...ROUND.filter((bin) => bin % period === 0), ...multiples].filter(fits)
      : ROUND.filter((bin) => period % bin === 0 && fits(bin));
  return candidates.length ? Math.min(...candidates) : duration / period >= 10 ? duration : period;
}

/**
 * The bins of a run of `duration` ticks: `{ edges, per }`, bin i from `edges[i]` to
 * `edges[i + 1]` ticks after the start, `per` naming what a bin holds ("1 h", "day").
 * Round widths that fit `period` (`binWidth`); given `calendar`, `{ startMs, timeZone }`,
 * the days in that zone from `startMs` (a DST change's day is 23 or 25 hours), or weeks
 * (from Monday) or months where days would be too many.
 */
export function binsOf(duration, period, calendar = null) {
  if (calendar) {
    const { startMs, timeZone } = calendar;
    for (const [per, days] of [["day", 1], ["week", 7], ["month", 28]]) {
      // A unit surely making too many bins is skipped before its periods are computed.
      if (duration > MAX_BINS * days * D) continue;
      const ms = calendarBoundaries(per, timeZone, startMs, startMs + (duration - 1) / MS);
      if (ms.length - 1 <= MAX_BINS) return { per, edges: ms.map((at) => Math.max(0, Math.round((at - startMs) * MS))) };
    }
  }
  const bin = binWidth(duration, period);
  return { per: human(bin), edges: Array.from({ length: Math.ceil(duration / bin) + 1 }, (_, k) => k * bin) };
}

/** The CLI's seedable xorshift generator, on 64-bit BigInts: the same seed, the same traffic. */
class XorShift {
  constructor(seed) {
    this.state = BigInt.asUintN(64, BigInt(seed));
  }
  next() {
    let x = this.state;
    x ^= BigInt.asUintN(64, x << 13n);
    x ^= x >> 7n;
    x ^= BigInt.asUintN(64, x << 17n);
    this.state = x;
    return x;
  }
  /** Uniform in (0, 1]. */
  unit() {
    return Number((this.next() >> 11n) + 1n) / 2 ** 53;
  }
}

/**
 * The arrival times (ticks, in order, below `duration`) of synthetic traffic:
 * `{ kind: "steady", rate }` per second evenly spaced, `{ kind: "poisson", rate, seed }`
 * with exponential gaps, `{ kind: "burst", size, every }` (every in ticks).
 */
export function* arrivals(traffic, duration) {
  if (traffic.kind === "steady") {
    for (let n = 0; ; n++) {
      const at = Math.floor((n * S) / traffic.rate);
      if (at >= duration) return;
      yield at;
    }
  } else if (traffic.kind === "burst") {
    for (let start = 0; start < duration; start += traffic.every) {
      for (let i = 0; i < traffic.size; i++) yield start;
    }
  } else {
    const random = new XorShift(BigInt(traffic.seed ?? 0) ^ 0x9e3779b97f4a7c15n);
    const gap = S / traffic.rate;
    let next = 0;
    for (;;) {
      const at = Math.trunc(next);
      if (at >= duration) return;
      yield at;
      next += -Math.log(random.unit()) * gap;
      random.next(); // the CLI draws a key for each request from the same generator
    }
  }
}

/** How many requests `traffic` offers over `duration` (Poisson: on average). */
export function expected(traffic, duration) {
  if (traffic.kind === "burst") return Math.ceil(duration / traffic.every) * traffic.size;
  return (duration * traffic.rate) / S;
}

/**
 * Offers `traffic` for `duration` ticks to one key of `policy`, decided by a `Limiter`
 * (the wasm core), from the epoch in bins fitting `period`, as the CLI does; a policy
 * with a calendar window from the start of the day holding `nowMs` in `timeZone` (the
 * browser's own), in its days. Returns `{ startMs, timeZone, per, edges, bins:
 * [[admitted, denied], ...], offered, admitted, denied }` (`timeZone` null without a
 * calendar); throws an Error with a message for a policy or traffic it cannot run.
 */
export function simulate(Limiter, policy, traffic, duration, { period, nowMs = Date.now(), timeZone = null } = {}) {
  if (expected(traffic, duration) > MAX_OFFERED) {
    throw new Error(`more than ${MAX_OFFERED} requests to preview: lower the traffic or shorten the run`);
  }
  timeZone = inCalendar(policy) ? timeZone ?? Intl.DateTimeFormat().resolvedOptions().timeZone : null;
  const startMs = timeZone ? calendarBoundaries("day", timeZone, nowMs, nowMs)[0] : 0;
  const { per, edges } = binsOf(duration, period, timeZone && { startMs, timeZone });
  const limiter = new Limiter(limiterOptions(policy, startMs, startMs + duration / MS));
  try {
    const bins = Array.from({ length: edges.length - 1 }, () => [0, 0]);
    let admitted = 0;
    let offered = 0;
    let bin = 0;
    for (const at of arrivals(traffic, duration)) {
      const allowed = limiter.check(1, startMs + at / MS).allowed;
      while (at >= edges[bin + 1]) bin++;
      bins[bin][allowed ? 0 : 1] += 1;
      admitted += allowed ? 1 : 0;
      offered += 1;
    }
    return { startMs, timeZone, per, edges, bins, offered, admitted, denied: offered - admitted };
  } finally {
    limiter.free();
  }
}
