// The page's preview decides as `sluicegate simulate` does: the same traffic, the same bins,
// the same admitted and denied counts, through the wasm core (the Node.js package, the
// same module the page loads), composites and bans included. Run after scripts/build-wasm.sh and a build of the CLI:
// `node --test server/web/tests/preview.test.mjs` (SLUICEGATE_BIN names the binary, else
// target/debug/sluicegate).
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { test } from "node:test";
import assert from "node:assert/strict";

import { Limiter } from "../../../wasm/pkg/nodejs/index.mjs";
import { binWidth, simulate } from "../dist/preview.js";
import { describe as words, inUnitOf, limiterOptions, parseDuration, shortDuration, unshownSettings } from "../dist/policy.js";

const root = fileURLToPath(new URL("../../..", import.meta.url));
const cli = process.env.SLUICEGATE_BIN ?? join(resolve(root, process.env.CARGO_TARGET_DIR ?? "target"), "debug", "sluicegate");
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

test("calendar windows and overdrafts in words; calendar windows are not previewed", () => {
  const monthly = { algorithm: "calendar-window", limit: 10000, calendar: "month", "time-zone": "Europe/Berlin" };
  assert.equal(words(monthly), "10000 per calendar month in Europe/Berlin");
  assert.equal(
    words({ algorithm: "calendar-window", limit: 50, calendar: "day", overdraft: 5 }),
    "50 per calendar day in UTC, reported costs up to 5 beyond",
  );
  // The page's module is the default build, without the zone database.
  assert.throws(() => limiterOptions(monthly), /decided by the server only/);
  assert.throws(() => new Limiter({ algorithm: "calendar-window", limit: 1, calendar: "day" }), /unknown algorithm/);
  // The overdraft reaches the core, which refuses it beside a ban as the server does.
  const owing = { algorithm: "fixed-window", limit: 3, period: "1s", overdraft: 2 };
  assert.equal(limiterOptions(owing).overdraft, 2);
  const banned = { ...owing, ban: { threshold: 3, window: "1m", duration: "10m" } };
  assert.throws(() => simulate(Limiter, banned, { kind: "steady", rate: 10 }, 10 * S, S), /overdraft is for/);
});

test("an invalid parameter is the core's message, not a crash", () => {
  const traffic = { kind: "steady", rate: 10 };
  assert.throws(
    () => simulate(Limiter, { algorithm: "token-bucket", capacity: 0, rate: 5, period: "1s" }, traffic, 10 * S, S),
    /capacity must be between 1 and/,
  );
  assert.throws(
    () => simulate(Limiter, { algorithm: "fixed-window", limit: 5, period: "1s" }, { kind: "steady", rate: 1_000_000 }, 10 * S, S),
    /more than 200000 requests/,
  );
});

/** What `sluicegate simulate` admits and denies for `policy` (TOML lines) and `traffic`. */
function simulated(toml, traffic, duration) {
  const dir = mkdtempSync(join(tmpdir(), "sluicegate-preview-"));
  try {
    writeFileSync(join(dir, "policies.toml"), `[policies.p]\n${toml}\n`);
    const out = execFileSync(cli, ["simulate", "--config", join(dir, "policies.toml"), "--policy", "p", "--traffic", traffic, "--duration", duration], { encoding: "utf8" });
    const count = (row) => Number(new RegExp(`^${row}\\s+(\\d+)`, "m").exec(out)[1]);
    return { admitted: count("admitted"), denied: count("denied") };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

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
const TRAFFIC = [
  [{ kind: "steady", rate: 13 }, "steady:rate=13"],
  [{ kind: "poisson", rate: 11, seed: 1 }, "poisson:rate=11,seed=1"],
  [{ kind: "burst", size: 12, every: 1_500_000 }, "burst:size=12,every=1500ms"],
];

test("the preview admits exactly what `sluicegate simulate` admits", () => {
  for (const [policy, toml] of POLICIES) {
    for (const [traffic, spec] of TRAFFIC) {
      const page = simulate(Limiter, policy, traffic, 30 * S, parseDuration(policy.period ?? "1s"));
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
