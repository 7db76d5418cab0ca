// What the CLI decides, for the page's tests to compare with: `sluicegate simulate`'s
// counts, and by `sluicegate replay` the counts at given times and the core's calendar
// periods. SLUICEGATE_BIN names the binary, else target/debug/sluicegate.
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("../../..", import.meta.url));
const cli = process.env.SLUICEGATE_BIN ?? join(resolve(root, process.env.CARGO_TARGET_DIR ?? "target"), "debug", "sluicegate");

/** `command`'s output for the policy `p` (TOML lines), with `files` beside its config. */
function run(command, toml, args, files = {}) {
  const dir = mkdtempSync(join(tmpdir(), "sluicegate-page-cli-"));
  try {
    writeFileSync(join(dir, "policies.toml"), `[policies.p]\n${toml}\n`);
    for (const [name, text] of Object.entries(files)) writeFileSync(join(dir, name), text);
    const paths = args.map((arg) => (arg in files ? join(dir, arg) : arg));
    return execFileSync(cli, [command, "--config", join(dir, "policies.toml"), "--policy", "p", ...paths], { encoding: "utf8" });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** What `sluicegate simulate` admits and denies for `policy` (TOML lines) and `traffic`. */
export function simulated(toml, traffic, duration) {
  const out = run("simulate", toml, ["--traffic", traffic, "--duration", duration]);
  const count = (row) => Number(new RegExp(`^${row}\\s+(\\d+)`, "m").exec(out)[1]);
  return { admitted: count("admitted"), denied: count("denied") };
}

/** What `sluicegate replay` admits and denies for `policy` (TOML lines): a request at each of `timesUs`. */
export function replayed(toml, timesUs) {
  const trace = ["t_us,key,cost", ...timesUs.map((t) => `${t},k,1`)].join("\n");
  const rows = run("replay", toml, ["--trace", "trace.csv"], { "trace.csv": `${trace}\n` }).trim().split("\n");
  const admitted = rows.filter((line) => JSON.parse(line).allowed).length;
  return { admitted, denied: rows.length - admitted };
}

/**
 * The ends (ms) of the core's periods of `calendar` in `zone` holding `fromMs` and the
 * instants just before and at each of `boundaries` (ms), as `got`, beside the ends the
 * boundaries say, as `want`: equal when the boundaries are the core's.
 */
export function corePeriods(calendar, zone, boundaries, fromMs) {
  const probes = [[fromMs, boundaries[1]]];
  boundaries.forEach((at, i) => {
    if (at > 0) probes.push([at - 0.001, at]);
    if (i + 1 < boundaries.length) probes.push([at, boundaries[i + 1]]);
  });
  probes.sort(([a], [b]) => a - b);
  const trace = ["t_us,key,cost", ...probes.map(([t], i) => `${Math.round(t * 1000)},k${i},1`)].join("\n");
  const toml = `algorithm = "calendar-window"\nlimit = 1000000000\ncalendar = "${calendar}"\ntime-zone = "${zone}"`;
  const rows = run("replay", toml, ["--trace", "trace.csv"], { "trace.csv": `${trace}\n` }).trim().split("\n");
  return {
    got: rows.map((line) => JSON.parse(line)).map((row) => (row.t_us + row.reset_after_us) / 1000),
    want: probes.map(([, end]) => end),
  };
}
