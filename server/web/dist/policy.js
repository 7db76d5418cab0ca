// Policies as the page shows and previews them: durations as the policy file writes
// them ("250ms", "1s"), parameters in words, and the wasm `Limiter` options of a policy.
// No DOM here, so Node.js tests import it too.

import { calendarBoundaries } from "./calendar.js";

/** Microseconds per unit, largest first: the policy file's suffixes. */
const UNITS = [
  ["d", 86_400_000_000, "days"],
  ["h", 3_600_000_000, "h"],
  ["m", 60_000_000, "min"],
  ["s", 1_000_000, "s"],
  ["ms", 1_000, "ms"],
  ["us", 1, "µs"],
];

/** The algorithms, their parameters and a short explanation, in the editor's order. */
export const ALGORITHMS = {
  "token-bucket": { fields: ["capacity", "rate", "period", "overdraft"], about: "bursts up to the capacity, refilled at the rate" },
  "leaky-bucket": { fields: ["capacity", "rate", "period", "overdraft"], about: "a funnel: holds the capacity, leaks at the rate" },
  pacing: { fields: ["capacity", "rate", "period"], about: "admitted requests spaced evenly, up to the capacity waiting" },
  "fixed-window": { fields: ["limit", "period", "overdraft"], about: "the limit per window aligned to the clock" },
  "sliding-log": { fields: ["limit", "period", "overdraft"], about: "the limit in any period (exact, memory grows with the limit)" },
  "sliding-counter": { fields: ["limit", "period", "overdraft"], about: "the limit in any period, estimated from two windows" },
  "calendar-window": {
    fields: ["limit", "calendar", "time-zone", "overdraft"],
    about: "the limit per calendar day, ISO week (from Monday) or month in a time zone, reset at its true end",
  },
  concurrency: { fields: ["limit", "lease", "fair"], about: "leases: at most the limit shared at once, or one exclusive" },
  composite: { fields: ["limits"], about: "several limits on one key: admitted only if all admit" },
};

/** The canonical name of an algorithm: the API still reads "leaky-pacing", pacing's old name. */
export function algorithmName(name) {
  return name === "leaky-pacing" ? "pacing" : name;
}

/** Ticks (microseconds) of a duration written like "250ms", or null if it is not one. */
export function parseDuration(text) {
  const match = /^(\d+)(us|ms|s|m|h|d)$/.exec(String(text).trim());
  if (!match) return null;
  const ticks = Number(match[1]) * UNITS.find(([suffix]) => suffix === match[2])[1];
  return Number.isSafeInteger(ticks) ? ticks : null;
}

/** A duration in its largest exact unit, as the policy file writes it: "1s", "1500ms". */
export function shortDuration(ticks) {
  const [suffix, scale] = UNITS.find(([, scale]) => ticks % scale === 0) ?? UNITS[5];
  return `${ticks / scale}${suffix}`;
}

/** A duration for people, to at most three decimals: "2 days", "1.5 s", "250 ms". */
export function human(ticks) {
  if (ticks === 0) return "0 s";
  const [, scale, name] = UNITS.find(([, scale]) => ticks >= scale) ?? UNITS[5];
  const value = Math.round((ticks / scale) * 1000) / 1000;
  return `${value} ${name === "days" && value === 1 ? "day" : name}`;
}

/**
 * An axis tick: `ticks` in the largest unit both it and the `step` are whole multiples
 * of, as the CLI's charts label them: "0", "500 ms", "1500 ms", "6 h".
 */
export function inUnitOf(ticks, step) {
  if (ticks === 0) return "0";
  const [, scale, name] = UNITS.find(([, scale]) => step % scale === 0 && ticks % scale === 0) ?? UNITS[5];
  const count = ticks / scale;
  return `${count} ${name === "days" && count === 1 ? "day" : name}`;
}

/** "per second", "per 2 s": the period a rate or limit is counted over. */
function per(period) {
  const ticks = parseDuration(period);
  if (ticks === null) return `per ${period}`;
  const word = { 1_000_000: "second", 60_000_000: "minute", 3_600_000_000: "hour", 86_400_000_000: "day" }[ticks];
  return word ? `per ${word}` : `per ${human(ticks)}`;
}

/** A policy's parameters in words: "bursts of 10, 5 per second". */
export function describe(policy) {
  const { capacity, rate, limit, period } = policy;
  let words;
  switch (algorithmName(policy.algorithm)) {
    case "token-bucket":
      words = `bursts of ${capacity}, ${rate} ${per(period)}`;
      break;
    case "leaky-bucket":
      words = `holds ${capacity}, leaks ${rate} ${per(period)}`;
      break;
    case "pacing":
      words = `${rate} ${per(period)}, evenly spaced, up to ${capacity} waiting`;
      break;
    case "fixed-window":
      words = `${limit} ${per(period)} (fixed windows)`;
      break;
    case "sliding-log":
      words = `${limit} in any ${human(parseDuration(period) ?? 0)} (exact)`;
      break;
    case "sliding-counter":
      words = `${limit} in any ${human(parseDuration(period) ?? 0)} (estimated)`;
      break;
    case "calendar-window":
      words = `${limit} per calendar ${policy.calendar} in ${policy["time-zone"] || "UTC"}`;
      break;
    case "concurrency":
      words = `${limit} at once, leases of ${human(parseDuration(policy.lease) ?? 0)}${policy.fair ? ", in the order asked" : ""}`;
      break;
    case "composite":
      words = (policy.limits ?? []).map(describe).join(" and ");
      break;
    default:
      words = String(policy.algorithm);
  }
  if (policy.overdraft) words += `, reported costs up to ${policy.overdraft} beyond`;
  const ban = policy.ban;
  if (ban) {
    words += `; banned for ${human(parseDuration(ban.duration) ?? 0)} after more than ${ban.threshold} denied in ${human(parseDuration(ban.window) ?? 0)}`;
  }
  return words;
}

/** A calendar's usual day, week and month, which a chart bins by (24 hours, 7 days, 30 days). */
const USUAL = { day: 86_400_000_000, week: 7 * 86_400_000_000, month: 30 * 86_400_000_000 };

/**
 * The period the preview's bins fit, as the CLI's: the policy's period, a calendar's
 * usual one, a composite's longest member's; null if there is none.
 */
export function periodOf(policy) {
  if (Array.isArray(policy.limits)) return Math.max(0, ...policy.limits.map((member) => periodOf(member) ?? 0)) || null;
  return parseDuration(policy.period ?? "") ?? USUAL[policy.calendar] ?? null;
}

/** The sustained rate of a policy as [units, period ticks], for the chart's reference line. */
export function sustained(policy) {
  const period = parseDuration(policy.period);
  if (period === null) return null;
  if (policy.limit !== undefined && policy.algorithm !== "concurrency") return [policy.limit, period];
  if (policy.rate !== undefined) return [policy.rate, period];
  return null;
}

/** Whether `policy` or a member of it is a calendar window. */
export const inCalendar = (policy) =>
  policy.algorithm === "calendar-window" || (Array.isArray(policy.limits) && policy.limits.some(inCalendar));

/**
 * The options of the wasm `Limiter` that decides as `policy` does from `fromMs` to
 * `toMs` (ms since the epoch), or an Error saying why the policy cannot be previewed
 * (leases, a malformed duration, a time zone the browser does not know).
 */
export function limiterOptions(policy, fromMs = 0, toMs = fromMs) {
  const ms = (name, text) => {
    const ticks = parseDuration(text);
    if (ticks === null) throw new Error(`${name}: use a whole number with us, ms, s, m, h or d, like 250ms`);
    return ticks / 1000;
  };
  const number = (value) => (value === "" || value === undefined ? undefined : Number(value));
  const algorithm = algorithmName(policy.algorithm);
  let options;
  if (algorithm === "composite") {
    if (!Array.isArray(policy.limits)) throw new Error("limits: a JSON list of limits");
    options = { algorithm: "composite", members: (policy.limits ?? []).map((member) => limiterOptions(member, fromMs, toMs)) };
  } else if (algorithm === "concurrency") {
    throw new Error("leases cannot be previewed: they depend on how long each holder keeps one");
  } else {
    options = { algorithm };
    if (algorithm === "calendar-window") {
      // The periods from the browser's zone data: the page's module has no database.
      const timeZone = policy["time-zone"] || "UTC";
      const boundariesMs = calendarBoundaries(policy.calendar, timeZone, fromMs, toMs);
      Object.assign(options, { calendar: policy.calendar, timeZone, boundariesMs });
    } else {
      options.periodMs = ms("period", policy.period);
    }
    // The overdraft changes no decision here (the preview reports no costs), but the
    // core refuses it where the server does (beside a ban).
    for (const field of ["limit", "capacity", "rate", "overdraft"]) {
      if (ALGORITHMS[algorithm]?.fields.includes(field)) options[field] = number(policy[field]);
    }
  }
  if (policy.ban) {
    options.ban = {
      threshold: number(policy.ban.threshold),
      windowMs: ms("ban window", policy.ban.window),
      durationMs: ms("ban duration", policy.ban.duration),
    };
  }
  return options;
}

/** The fields of a stored policy that only describe it (who made it, when, its version). */
const METADATA = ["name", "version", "created_by", "updated_by", "created_at", "updated_at"];

/**
 * The settings of a stored `policy` the editor does not show (`shadow`, `on_full`,
 * `max_lease`, …), without its metadata: a save from the page sends them back as they
 * are, so it changes only what the form shows. `shown` names the fields the form writes.
 */
export function unshownSettings(policy, shown) {
  return Object.fromEntries(
    Object.entries(policy ?? {}).filter(([field]) => !shown.includes(field) && !METADATA.includes(field)),
  );
}
