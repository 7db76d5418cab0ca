// The page's preview decides as `sluicegate simulate` does: the same traffic, the same bins,
// the same admitted and denied counts, through the wasm core (the Node.js package, the
// same module the page loads), composites, bans and calendar windows included; the
// calendar periods the page computes with Intl are the core's. A calendar window's
// preview runs from today in the browser's zone, in its days, as `sluicegate replay`
// decides those times. Run after scripts/build-wasm.sh and a build of the CLI:
// `node --test server/web/tests/preview.test.mjs` (SLUICEGATE_BIN names the binary, else
// target/debug/sluicegate).
import { test } from "node:test";
import assert from "node:assert/strict";

import { Limiter } from "../../../wasm/pkg/full/node.js";
import { calendarBoundaries } from "../dist/calendar.js";
import { binWidth, binsOf, simulate } from "../dist/preview.js";
import { describe as words, inUnitOf, limiterOptions, parseDuration, periodOf, shortDuration, unshownSettings } from "../dist/policy.js";
import { corePeriods, replayed, simulated } from "./cli.mjs";

const S = 1_000_000;

test("bins are the CLI's", () => {
  assert.equal(binWidth(10 * S, S), S);
  assert.equal(binWidth(2 * 86_400 * S, S), 30 * 60 * S);
  assert.equal(binWidth(5 * S, S), 50_000);
  assert.equal(binWidth(100 * S, 7 * S), 7 * S);
  assert.equal(binWidth(10_000 * S, 7 * S), 140 * S);
  assert.equal(binWidth(1, 1), 1);
});

test("durations and words", () => {
  assert.equal(parseDuration("250ms"), 250_000);
  assert.equal(parseDuration("1d"), 86_400 * S);
  assert.equal(parseDuration("1.5s"), null);
  assert.equal(parseDuration("99999999999d"), null);
  assert.equal(shortDuration(1_500_000), "1500ms");
  // Axis ticks in the step's unit, as the CLI's charts write them.
  assert.deepEqual([0, 500_000, 1_000_000, 1_500_000].map((t) => inUnitOf(t, 500_000)), ["0", "500 ms", "1000 ms", "1500 ms"]);
  assert.deepEqual([2 * S, 4 * S].map((t) => inUnitOf(t, 2 * S)), ["2 s", "4 s"]);
  assert.equal(inUnitOf(86_400 * S, 6 * 3_600 * S), "24 h");
  assert.equal(inUnitOf(86_400 * S, 86_400 * S), "1 day");
  assert.equal(words({ algorithm: "token-bucket", capacity: 10, rate: 5, period: "1s" }), "bursts of 10, 5 per second");
  assert.equal(
    words({ algorithm: "sliding-log", limit: 5, period: "1m", ban: { threshold: 3, window: "1m", duration: "10m" } }),
    "5 in any 1 min (exact); banned for 10 min after more than 3 denied in 1 min",
  );
  // Pacing's old name still reads, as the API reads it.
  const pacing = { algorithm: "pacing", capacity: 4, rate: 1, period: "2s" };
  const old = { ...pacing, algorithm: "leaky-pacing" };
  assert.equal(words(old), words(pacing));
  assert.deepEqual(limiterOptions({ algorithm: "composite", limits: [old] }), limiterOptions({ algorithm: "composite", limits: [pacing] }));
  assert.throws(() => limiterOptions({ algorithm: "concurrency", limit: 3, lease: "30s" }), /leases cannot be previewed/);
  assert.throws(() => limiterOptions({ algorithm: "fixed-window", limit: 3, period: "soon" }), /period: use a whole number/);
});

test("calendar windows and overdrafts in words; calendar periods from the browser's zone data", () => {
  const monthly = { algorithm: "calendar-window", limit: 10000, calendar: "month", "time-zone": "Europe/Berlin" };
  assert.equal(words(monthly), "10000 per calendar month in Europe/Berlin");
  assert.equal(
    words({ algorithm: "calendar-window", limit: 50, calendar: "day", overdraft: 5 }),
    "50 per calendar day in UTC, reported costs up to 5 beyond",
  );
  // The page's module is the default build, without the zone database: the page passes
  // the periods, here the months of Berlin holding the first 40 days of 1970.
  const march = Date.UTC(1970, 2, 1) - 3_600_000;
  assert.deepEqual(limiterOptions(monthly, 0, 40 * 86_400_000), {
    algorithm: "calendar-window", calendar: "month", timeZone: "Europe/Berlin", limit: 10000, overdraft: undefined,
    boundariesMs: [0, Date.UTC(1970, 1, 1) - 3_600_000, march],
  });
  assert.throws(() => new Limiter({ algorithm: "calendar-window", limit: 1, calendar: "day" }), /boundariesMs is required/);
  assert.throws(() => limiterOptions({ ...monthly, "time-zone": "Europe/Atlantis" }), /does not know "Europe\/Atlantis"/);
  // The bins fit the usual month, as the CLI's do.
  assert.equal(periodOf(monthly), 30 * 86_400 * S);
  assert.equal(periodOf({ algorithm: "composite", limits: [monthly, { algorithm: "fixed-window", limit: 1, period: "1s" }] }), 30 * 86_400 * S);
  // The overdraft reaches the core, which refuses it beside a ban as the server does.
  const owing = { algorithm: "fixed-window", limit: 3, period: "1s", overdraft: 2 };
  assert.equal(limiterOptions(owing).overdraft, 2);
  const banned = { ...owing, ban: { threshold: 3, window: "1m", duration: "10m" } };
  assert.throws(() => simulate(Limiter, banned, { kind: "steady", rate: 10 }, 10 * S, { period: S }), /overdraft is for/);
});

test("the page's calendar periods are the core's, across daylight-saving changes", () => {
  const day = (y, m, d) => Date.UTC(y, m - 1, d);
  const cases = [
    // From the epoch, as a preview runs: 1970's spring change in New York on April 26.
    ["day", "America/New_York", 0, day(1970, 4, 29)],
    ["day", "America/New_York", day(2026, 3, 5), day(2026, 3, 11)],
    ["day", "America/New_York", day(2026, 10, 29), day(2026, 11, 3)],
    ["day", "Europe/Berlin", day(2026, 10, 23), day(2026, 10, 27)],
    ["week", "Europe/Berlin", day(2026, 3, 11), day(2026, 4, 15)],
    ["month", "Europe/Berlin", day(2025, 12, 20), day(2027, 1, 2)],
    // Clocks skip midnight: the day begins at 01:00.
    ["day", "America/Sao_Paulo", day(2018, 11, 2), day(2018, 11, 6)],
    // Clocks go back at 01:00 to midnight, and at midnight to 23:00 the day before.
    ["day", "America/Havana", day(2023, 11, 3), day(2023, 11, 7)],
    ["day", "Asia/Beirut", day(2023, 10, 27), day(2023, 10, 31)],
    ["week", "Asia/Beirut", day(2023, 10, 20), day(2023, 11, 10)],
    // A zone that skipped a whole date (Samoa's 30 December 2011).
    ["day", "Pacific/Apia", day(2011, 12, 28), day(2012, 1, 2)],
    ["month", "Pacific/Apia", day(2011, 11, 15), day(2012, 2, 2)],
  ];
  for (const [calendar, zone, from, to] of cases) {
    const boundaries = calendarBoundaries(calendar, zone, from, to);
    assert.ok(boundaries[0] <= from && boundaries.at(-1) > to, `${calendar} in ${zone} covers the span`);
    const { got, want } = corePeriods(calendar, zone, boundaries, from);
    assert.deepEqual(got, want, `${calendar} in ${zone} from ${new Date(from).toISOString()}`);
  }
});

test("an invalid parameter is the core's message, not a crash", () => {
  const traffic = { kind: "steady", rate: 10 };
  assert.throws(
    () => simulate(Limiter, { algorithm: "token-bucket", capacity: 0, rate: 5, period: "1s" }, traffic, 10 * S, { period: S }),
    /capacity must be between 1 and/,
  );
  assert.throws(
    () => simulate(Limiter, { algorithm: "fixed-window", limit: 5, period: "1s" }, { kind: "steady", rate: 1_000_000 }, 10 * S, { period: S }),
    /more than 200000 requests/,
  );
});

const POLICIES = [
  [{ algorithm: "token-bucket", capacity: 10, rate: 5, period: "1s" }, 'algorithm = "token-bucket"\ncapacity = 10\nrate = 5\nperiod = "1s"'],
  [{ algorithm: "leaky-bucket", capacity: 4, rate: 3, period: "1s" }, 'algorithm = "leaky-bucket"\ncapacity = 4\nrate = 3\nperiod = "1s"'],
  [{ algorithm: "pacing", capacity: 4, rate: 1, period: "2s" }, 'algorithm = "pacing"\ncapacity = 4\nrate = 1\nperiod = "2s"'],
  [{ algorithm: "fixed-window", limit: 7, period: "1s" }, 'algorithm = "fixed-window"\nlimit = 7\nperiod = "1s"'],
  [{ algorithm: "sliding-log", limit: 5, period: "3s" }, 'algorithm = "sliding-log"\nlimit = 5\nperiod = "3s"'],
  [{ algorithm: "sliding-counter", limit: 9, period: "1s" }, 'algorithm = "sliding-counter"\nlimit = 9\nperiod = "1s"'],
  // An overdraft changes no decision without reports.
  [{ algorithm: "token-bucket", capacity: 6, rate: 4, period: "1s", overdraft: 3 }, 'algorithm = "token-bucket"\ncapacity = 6\nrate = 4\nperiod = "1s"\noverdraft = 3'],
  [
    {
      algorithm: "composite",
      limits: [
        { algorithm: "token-bucket", capacity: 5, rate: 3, period: "1s" },
        { algorithm: "fixed-window", limit: 20, period: "10s" },
      ],
    },
    'algorithm = "composite"\nlimits = [{ algorithm = "token-bucket", capacity = 5, rate = 3, period = "1s" }, { algorithm = "fixed-window", limit = 20, period = "10s" }]',
  ],
  [
    { algorithm: "sliding-log", limit: 5, period: "1s", ban: { threshold: 3, window: "2s", duration: "5s" } },
    'algorithm = "sliding-log"\nlimit = 5\nperiod = "1s"\nban = { threshold = 3, window = "2s", duration = "5s" }',
  ],
];
// Days in New York over the first 120 days of 1970, its 23-hour 26 April among them:
// 48 requests a day, 2 denied on each of its 118 full days, none on the short one.
const CALENDAR = [
  { algorithm: "calendar-window", limit: 46, calendar: "day", "time-zone": "America/New_York" },
  'algorithm = "calendar-window"\nlimit = 46\ncalendar = "day"\ntime-zone = "America/New_York"',
];

test("the preview decides calendar windows as `sluicegate simulate`", () => {
  const [policy, toml] = CALENDAR;
  // From the epoch, where the CLI's simulation starts: today's start in UTC at time 0.
  const epoch = { period: periodOf(policy), nowMs: 0, timeZone: "UTC" };
  const page = simulate(Limiter, policy, { kind: "burst", size: 1, every: 1800 * S }, 120 * 86_400 * S, epoch);
  assert.equal(page.startMs, 0);
  assert.deepEqual({ admitted: page.admitted, denied: page.denied }, simulated(toml, "burst:size=1,every=30m", "120d"));
  assert.deepEqual([page.admitted, page.denied], [5760 - 236, 236]);
});

test("a calendar window's preview starts today in the browser's zone, in bins of its days", () => {
  const [policy, toml] = CALENDAR;
  const H = 3_600 * S;
  const traffic = { kind: "burst", size: 1, every: 1800 * S };
  // Today, in this machine's zone (the browser's on the page), not 1970.
  const today = simulate(Limiter, policy, traffic, 7 * 86_400 * S, { period: periodOf(policy) });
  assert.equal(today.timeZone, Intl.DateTimeFormat().resolvedOptions().timeZone);
  assert.ok(today.startMs <= Date.now() && Date.now() - today.startMs < 25 * 3_600_000, new Date(today.startMs).toISOString());
  assert.equal(today.per, "day");
  // A week in New York from Thursday 5 March 2026, 10:00 there: from its midnight, a bin
  // per day, Sunday's 23 hours among them (a 168-hour run ends at 01:00 on the eighth).
  const week = simulate(Limiter, policy, traffic, 7 * 86_400 * S, {
    period: periodOf(policy), nowMs: Date.UTC(2026, 2, 5, 15), timeZone: "America/New_York",
  });
  assert.equal(week.startMs, Date.UTC(2026, 2, 5, 5));
  assert.equal(week.per, "day");
  assert.deepEqual(week.edges.map((t) => t / H), [0, 24, 48, 72, 95, 119, 143, 167, 191]);
  // Each day of the policy's zone holds its 46 admitted: 48 offered, 46 on the short one.
  assert.deepEqual(week.bins, [[46, 2], [46, 2], [46, 2], [46, 0], [46, 2], [46, 2], [46, 2], [2, 0]]);
  const times = Array.from({ length: 336 }, (_, k) => week.startMs * 1000 + k * 1800 * S);
  assert.deepEqual({ admitted: week.admitted, denied: week.denied }, replayed(toml, times));
  // Weeks, then months, where days would be more bins than a chart draws.
  const berlin = { startMs: Date.UTC(2026, 0, 14, 23), timeZone: "Europe/Berlin" };
  assert.equal(binsOf(100 * 86_400 * S, 86_400 * S, berlin).per, "day");
  const weeks = binsOf(200 * 86_400 * S, 86_400 * S, berlin);
  assert.equal(weeks.per, "week");
  // From Thursday to Monday, then whole weeks (the one of 29 March 167 hours).
  assert.deepEqual(weeks.edges.slice(0, 3).map((t) => t / H), [0, 4 * 24, 11 * 24]);
  assert.ok(weeks.edges.some((t, i) => i > 0 && t - weeks.edges[i - 1] === 167 * H));
  assert.equal(binsOf(3 * 365 * 86_400 * S, 86_400 * S, berlin).per, "month");
  // Without a calendar window, round bins from the epoch, as the CLI's.
  const fixed = simulate(Limiter, { algorithm: "fixed-window", limit: 7, period: "1s" }, { kind: "steady", rate: 13 }, 30 * S, { period: S });
  assert.deepEqual([fixed.startMs, fixed.timeZone, fixed.per, fixed.edges.length], [0, null, "1 s", 31]);
});

const TRAFFIC = [
  [{ kind: "steady", rate: 13 }, "steady:rate=13"],
  [{ kind: "poisson", rate: 11, seed: 1 }, "poisson:rate=11,seed=1"],
  [{ kind: "burst", size: 12, every: 1_500_000 }, "burst:size=12,every=1500ms"],
];

test("the preview admits exactly what `sluicegate simulate` admits", () => {
  for (const [policy, toml] of POLICIES) {
    for (const [traffic, spec] of TRAFFIC) {
      const page = simulate(Limiter, policy, traffic, 30 * S, { period: parseDuration(policy.period ?? "1s") });
      const expected = simulated(toml, spec, "30s");
      assert.deepEqual(
        { admitted: page.admitted, denied: page.denied },
        expected,
        `${policy.algorithm} under ${spec}`,
      );
      assert.ok(page.admitted > 0 && page.denied > 0, `${policy.algorithm} under ${spec} admits and denies some`);
      assert.equal(page.bins.reduce((sum, [a]) => sum + a, 0), page.admitted);
    }
  }
});

test("a save from the page keeps the settings its form does not show", () => {
  const stored = {
    name: "api", version: 3, created_by: "root", updated_by: "root", created_at: "x", updated_at: "y",
    algorithm: "token-bucket", capacity: 10, rate: 5, period: "1s", apps: ["web"], description: "",
    shadow: true, on_full: "evict",
  };
  const shown = ["algorithm", "capacity", "rate", "period", "limit", "ban", "apps", "description"];
  assert.deepEqual(unshownSettings(stored, shown), { shadow: true, on_full: "evict" });
  assert.deepEqual(unshownSettings(null, shown), {});
});
