// The server's pushback, read from response headers: `Retry-After` (seconds or an HTTP
// date) pauses the queue; the IETF `RateLimit` header (with `RateLimit-Policy`) caps the
// budget until the server's window ends. Read in JS, where dates and numbers parse for
// free, so the module only takes the three numbers. Headers that do not parse are
// ignored: a client must keep working whatever a server sends.

const MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];

/** A whole number of digits only (what a header's integer is), else undefined. */
function integer(text) {
  return text !== undefined && /^\d+$/.test(text) ? Number(text) : undefined;
}

/**
 * An HTTP date in the IMF-fixdate form servers send (`Sun, 06 Nov 1994 08:49:37 GMT`,
 * RFC 9110 §5.6.7), as milliseconds since the epoch; undefined for any other text.
 */
export function httpDate(text) {
  const fields = text.trim().split(/\s+/);
  if (fields.length !== 6 || !fields[0].endsWith(",") || fields[5] !== "GMT") return undefined;
  const [, day, monthName, year, time] = fields;
  const month = MONTHS.indexOf(monthName);
  const clock = time.split(":");
  if (!/^\d\d$/.test(day) || month < 0 || !/^\d{4}$/.test(year) || clock.length !== 3) return undefined;
  if (!clock.every((part) => /^\d\d$/.test(part))) return undefined;
  const [hour, minute, second] = clock.map(Number);
  if (Number(year) < 1970 || hour > 23 || minute > 59 || second > 60) return undefined;
  const ms = Date.UTC(Number(year), month, Number(day), hour, minute, second);
  // Date.UTC rolls 31 November into December: such a date is not one.
  const date = new Date(Date.UTC(Number(year), month, Number(day)));
  return date.getUTCDate() === Number(day) && date.getUTCMonth() === month ? ms : undefined;
}

/** A structured-field list's members: `"default";r=50;t=30` is `["default", {r: "50", t: "30"}]`. */
function members(value) {
  return value.split(",").map((member) => {
    const [name = "", ...parts] = member.split(";").map((part) => part.trim());
    const params = {};
    for (const part of parts) {
      const equals = part.indexOf("=");
      if (equals >= 0) params[part.slice(0, equals)] ??= part.slice(equals + 1);
    }
    return [name.replaceAll('"', ""), params];
  });
}

/**
 * What the headers `get` reads (by lower-case name) ask at `nowMs`: `[resumeAtMs,
 * remaining, untilMs]`, NaN where they ask nothing. The tightest grant binds; among
 * equals, the longest.
 */
export function feedback(get, nowMs) {
  const header = (name) => {
    const value = get(name);
    return value === undefined || value === null ? undefined : String(value);
  };
  let resumeAt = NaN;
  const retry = header("retry-after")?.trim();
  if (retry !== undefined) {
    const seconds = integer(retry);
    const at = seconds === undefined ? httpDate(retry) : nowMs + seconds * 1000;
    if (at > nowMs) resumeAt = at;
  }
  const windows = new Map();
  for (const [name, params] of members(header("ratelimit-policy") ?? "")) {
    const seconds = integer(params.w);
    if (seconds !== undefined && !windows.has(name)) windows.set(name, seconds);
  }
  const grants = [];
  const ratelimit = header("ratelimit");
  if (ratelimit !== undefined) {
    for (const [name, params] of members(ratelimit)) {
      const remaining = integer(params.r);
      const seconds = integer(params.t) ?? windows.get(name);
      if (remaining !== undefined && seconds !== undefined) grants.push([remaining, seconds]);
    }
    // The earlier drafts' dictionary: `limit=100, remaining=50, reset=30`.
    const [earlier] = members(ratelimit.replaceAll(",", ";").replace(/^/, ";"));
    const [remaining, seconds] = [integer(earlier[1].remaining), integer(earlier[1].reset)];
    if (remaining !== undefined && seconds !== undefined) grants.push([remaining, seconds]);
  }
  // The earliest drafts' separate headers.
  const legacy = [integer(header("ratelimit-remaining")?.trim()), integer(header("ratelimit-reset")?.trim())];
  if (legacy[0] !== undefined && legacy[1] !== undefined) grants.push(legacy);
  grants.sort(([r1, s1], [r2, s2]) => r1 - r2 || s2 - s1);
  const [grant] = grants;
  return [resumeAt, grant ? grant[0] : NaN, grant ? nowMs + grant[1] * 1000 : NaN];
}
