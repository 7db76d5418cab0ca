// A calendar window's periods from the browser's own time-zone data (Intl), by the
// core's definition: a day, an ISO week (from Monday) or a month in a zone, each from
// the first instant of its first date there (midnight, or where a zone skips midnight,
// the first instant after it). The page's wasm module decides in them (`boundariesMs`),
// so it carries no time-zone database.

const DAY = 86_400_000;

/** The most periods a preview computes, so a long run cannot hang the page. */
const MAX_PERIODS = 100_000;

/**
 * The boundaries (ms since the epoch, increasing) of the periods of `calendar` ("day",
 * "week" or "month") in the IANA zone `timeZone` that hold `fromMs` to `toMs`: each
 * period runs from one to the next. The period holding the epoch starts at 0.
 */
export function calendarBoundaries(calendar, timeZone, fromMs, toMs) {
  let format;
  try {
    format = new Intl.DateTimeFormat("en-US", {
      timeZone, hourCycle: "h23", year: "numeric", month: "numeric", day: "numeric",
      hour: "numeric", minute: "numeric", second: "numeric",
    });
  } catch {
    throw new Error(`time zone: this browser does not know ${JSON.stringify(timeZone)}`);
  }
  /** The zone's wall clock at instant `t`, as the UTC instant reading the same (ms). */
  const wall = (t) => {
    const p = Object.fromEntries(format.formatToParts(t).map(({ type, value }) => [type, Number(value)]));
    return Date.UTC(p.year, p.month - 1, p.day, p.hour, p.minute, p.second) + (t - Math.floor(t / 1000) * 1000);
  };
  const offset = (t) => wall(t) - t;
  // The first instant of the date whose midnight reads `midnight`: the one instant
  // reading it, the earlier where clocks go back, the end of the gap where they skip it
  // (midnight read at the offset before the change, as the core resolves it).
  const start = (midnight) => {
    const before = offset(midnight - DAY);
    const reading = [midnight - before, midnight - offset(midnight + DAY)].filter((t) => wall(t) === midnight);
    return reading.length ? Math.min(...reading) : midnight - before;
  };
  const date = new Date(wall(fromMs));
  let first = Date.UTC(date.getUTCFullYear(), date.getUTCMonth(), calendar === "month" ? 1 : date.getUTCDate());
  if (calendar === "week") first -= ((new Date(first).getUTCDay() + 6) % 7) * DAY;
  const next = (midnight) => {
    const d = new Date(midnight);
    if (calendar === "month") return Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1);
    return midnight + (calendar === "week" ? 7 : 1) * DAY;
  };
  // Where clocks go back across midnight, an instant still dated the day before belongs
  // to the day that has begun.
  while (start(next(first)) <= fromMs) first = next(first);
  const boundaries = [Math.max(0, start(first))];
  while (boundaries.length < 2 || boundaries.at(-1) <= toMs) {
    if (boundaries.length > MAX_PERIODS) throw new Error(`more than ${MAX_PERIODS} calendar periods to preview: shorten the run`);
    first = next(first);
    const at = start(first);
    // A date a zone skipped whole begins where the next one does.
    if (at > boundaries.at(-1)) boundaries.push(at);
  }
  return boundaries;
}
