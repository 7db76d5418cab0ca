// End-to-end: the management page in real headless Chromium against a real
// `sluicegate serve` on loopback (its embedded store in a scratch directory). A viewer sees
// no edit controls and a forged write is refused; an owner creates a policy, the preview
// changes as the rate is edited, saves, and the decision API then decides with it; a
// calendar window is created in the editor and read back through the API, and one is
// previewed from today in the browser's zone as `sluicegate replay` decides those times,
// in the core's periods; a second tab's stale save gets the 409 with the newer version
// and a retry; the audit view shows the changes; a stale tab loads the newer version and
// deletes; a lease policy's page shows a key's holders and queue. Screenshots of the main views at 320 and 1400 px wide go to
// target/page-e2e/ (not committed). Labels and keyboard use are checked on every view.
//
// Run after building the CLI: `node server/web/e2e/e2e.mjs` (SLUICEGATE_BIN names the
// binary, else target/debug/sluicegate).
import { spawn, execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import assert from "node:assert/strict";
import { freePort, sleep, startBrowser } from "../../../scripts/webdriver.mjs";
import { calendarBoundaries } from "../dist/calendar.js";
import { corePeriods, replayed } from "../tests/cli.mjs";

const root = fileURLToPath(new URL("../../..", import.meta.url));
const target = resolve(root, process.env.CARGO_TARGET_DIR ?? "target");
const bin = process.env.SLUICEGATE_BIN ?? join(target, "debug", "sluicegate");
const shots = join(target, "page-e2e");
mkdirSync(shots, { recursive: true });

// ---- The server, its apps and users --------------------------------------------------

const data = mkdtempSync(join(tmpdir(), "sluicegate-page-"));
const adminToken = /sgu_[A-Za-z0-9_-]+/.exec(
  execFileSync(bin, ["serve", "--data-dir", data, "--init-admin"], { encoding: "utf8" }),
)?.[0];
assert.ok(adminToken, "--init-admin prints the admin's token");
const listen = `127.0.0.1:${await freePort()}`;
const server = spawn(bin, ["serve", "--data-dir", data, "--listen", listen], { stdio: ["ignore", "ignore", "inherit"] });
const site = `http://${listen}`;
// Every check below runs under the page's Content-Security-Policy: a script, style or
// wasm module it blocked would fail them.
const csp = async () => (await fetch(site + "/")).headers.get("content-security-policy") ?? "";

/** A JSON call to the server as `token`: `{ status, body, headers }`. */
async function api(token, method, path, body, headers = {}) {
  const response = await fetch(site + path, {
    method,
    headers: { Authorization: `Bearer ${token}`, ...(body ? { "Content-Type": "application/json" } : {}), ...headers },
    body: body ? JSON.stringify(body) : undefined,
  });
  const text = await response.text();
  return { status: response.status, body: text ? JSON.parse(text) : null, headers: response.headers };
}

let browser;
try {
  for (let attempt = 0; ; attempt++) {
    try {
      if ((await fetch(`${site}/healthz`)).ok) break;
    } catch (error) {
      if (attempt > 600) throw error; // 30 s or more: a loaded machine's start; one that never listens fails
    }
    await sleep(50);
  }
  assert.match(await csp(), /frame-ancestors 'none'/, "the page's Content-Security-Policy");
  const created = async (path, body) => {
    const reply = await api(adminToken, "POST", path, body);
    assert.equal(reply.status, 201, `${path}: ${JSON.stringify(reply.body)}`);
    return reply.body.token;
  };
  const webToken = await created("/v1/apps", { name: "web" });
  await created("/v1/apps", { name: "billing" });
  const owner = await created("/v1/users", { name: "olivia", roles: { web: "owner" }, admin: false });
  const viewer = await created("/v1/users", { name: "victor", roles: { web: "viewer" }, admin: false });
  const seeded = await api(adminToken, "PUT", "/v1/policies/api", {
    algorithm: "token-bucket", capacity: 10, rate: 5, period: "1s", apps: ["web"],
    // Shown as text, never as markup.
    description: 'Public API <img src=x onerror="window.injected = true">',
  });
  assert.equal(seeded.status, 201, JSON.stringify(seeded.body));
  const hidden = await api(adminToken, "PUT", "/v1/policies/invoices", {
    algorithm: "fixed-window", limit: 100, period: "1m", apps: ["billing"],
  });
  assert.equal(hidden.status, 201, JSON.stringify(hidden.body));
  const reports = await api(adminToken, "PUT", "/v1/policies/reports", {
    algorithm: "concurrency", limit: 4, lease: "5m", fair: true, apps: ["web"],
  });
  assert.equal(reports.status, 201, JSON.stringify(reports.body));
  // A reader holds key "doc"; a writer, then a reader, wait in line.
  const lease = (owner, extra = {}) =>
    api(webToken, "POST", "/v1/lease/acquire", { policy: "reports", key: "doc", owner, ...extra });
  assert.equal((await lease("reader-1")).body.acquired, true);
  assert.equal((await lease("writer", { mode: "exclusive", wait_us: 240e6 })).body.place.ahead, 0);
  assert.equal((await lease("reader-2", { wait_us: 240e6 })).body.place.ahead, 1);
  // Some decisions, for the live stats.
  for (let i = 0; i < 14; i++) await api(webToken, "POST", "/v1/decide", { policy: "api", key: "alice" });

  // ---- The browser -------------------------------------------------------------------

  browser = await startBrowser();
  const { call, run } = browser;
  /** Waits until `condition` (a JS expression) holds in the page; fails after 20 s (a loaded
   * machine's page; what never happens fails). */
  const until = async (condition, what = condition) => {
    const held = await run(`for (let i = 0; i < 400; i++) {
        if (${condition}) return true;
        await new Promise((r) => setTimeout(r, 50));
      }
      return false;`);
    assert.equal(held, true, `timed out waiting for ${what}`);
  };
  const find = async (css) => {
    const found = await call("POST", "/element", { using: "css selector", value: css });
    return Object.values(found)[0];
  };
  const click = async (css) => call("POST", `/element/${await find(css)}/click`, {});
  /** Types `text` into the field as a user would (replacing what it held). */
  const type = async (css, text) => {
    const element = await find(css);
    await call("POST", `/element/${element}/clear`, {});
    await call("POST", `/element/${element}/value`, { text: String(text) });
  };
  const text = (css) => run(`return document.querySelector(${JSON.stringify(css)})?.textContent ?? null;`);
  const go = async (hash, ready) => {
    await run(`location.hash = ${JSON.stringify(hash)}; return true;`);
    await until(ready);
  };
  const signIn = async (token) => {
    await call("POST", "/url", { url: `${site}/` });
    await run("sessionStorage.clear(); return true;");
    await call("POST", "/refresh", {});
    await until(`document.getElementById("token")`);
    await type("#token", token);
    // The keyboard submits the form: Enter in the field.
    await call("POST", `/element/${await find("#token")}/value`, { text: "\uE007" });
    await until(`document.getElementById("sign-out")`, "signed in");
  };

  /** Every control has a label, and Tab reaches each control of the view. */
  const accessible = async (view) => {
    const unlabelled = await run(`return [...document.querySelectorAll("input, select, textarea")]
      .filter((e) => e.labels.length === 0 && !e.getAttribute("aria-label"))
      .map((e) => e.id || e.name);`);
    assert.deepEqual(unlabelled, [], `${view}: every control has a label`);
    const unreached = await run(`
      const controls = [...document.querySelectorAll("a[href], button, input, select, textarea")]
        .filter((e) => e.offsetParent !== null && !e.disabled);
      return controls.filter((e) => e.tabIndex < 0).map((e) => e.id || e.textContent);`);
    assert.deepEqual(unreached, [], `${view}: every visible control is in the tab order`);
  };

  /** Full-page screenshots of the current view at 320 and 1400 px, and no sideways scrolling. */
  const screenshots = async (name) => {
    for (const width of [320, 1400]) {
      await call("POST", "/goog/cdp/execute", {
        cmd: "Emulation.setDeviceMetricsOverride",
        params: { width, height: 900, deviceScaleFactor: 1, mobile: width < 600 },
      });
      await run("window.dispatchEvent(new Event('resize')); await new Promise((r) => setTimeout(r, 400)); return true;");
      const overflow = await run("return document.documentElement.scrollWidth - window.innerWidth;");
      assert.ok(overflow <= 0, `${name} at ${width} px scrolls sideways by ${overflow} px`);
      const height = await run("return document.documentElement.scrollHeight;");
      const shot = await call("POST", "/goog/cdp/execute", {
        cmd: "Page.captureScreenshot",
        params: { format: "png", captureBeyondViewport: true, clip: { x: 0, y: 0, width, height, scale: 1 } },
      });
      writeFileSync(join(shots, `${name}-${width}.png`), Buffer.from(shot.data, "base64"));
    }
    await call("POST", "/goog/cdp/execute", { cmd: "Emulation.clearDeviceMetricsOverride", params: {} });
  };

  // 1. The viewer: the app's pages without controls; the server refuses a forged write.
  await signIn(viewer);
  await until(`document.querySelector(".cards")`, "the apps list");
  const apps = await run(`return [...document.querySelectorAll(".cards a")].map((a) => a.textContent);`);
  assert.deepEqual(apps, ["web"], "only the apps the viewer has a role in");
  await screenshots("apps");
  await go("#/apps/web", `document.getElementById("policies")`);
  assert.match(await text("#policies"), /bursts of 10, 5 per second/);
  assert.doesNotMatch(await text("#policies"), /invoices/);
  assert.match(await text("#policies"), /Public API <img src=x/, "markup in a description is shown as text");
  assert.equal(await run("return window.injected ?? false;"), false, "and never runs");
  assert.equal(await run(`return document.getElementById("new-policy");`), null, "no New policy for a viewer");
  await until(`document.querySelector('#stats figure[data-policy="api"]')`, "the live stats chart");
  assert.match(await text('#stats figure[data-policy="api"] figcaption'), /decisions\/s/);
  await accessible("app (viewer)");
  await screenshots("app-viewer");
  await go("#/apps/web/policies/api", `document.getElementById("preview-chart")`);
  const controls = await run(`return [...document.querySelectorAll("#editor, #save, #delete, button.danger")].length;`);
  assert.equal(controls, 0, "the viewer's policy page has no edit controls");
  assert.match(await text("#details"), /bursts of 10, 5 per second/);
  await accessible("policy (viewer)");
  await screenshots("policy-viewer");
  const forged = await run(`
    const token = sessionStorage.getItem("sluicegate.token");
    const headers = { Authorization: "Bearer " + token, "Content-Type": "application/json", "If-Match": '"1"' };
    const put = await fetch("/v1/policies/api", { method: "PUT", headers,
      body: JSON.stringify({ algorithm: "token-bucket", capacity: 1000, rate: 1000, period: "1s", apps: ["web"] }) });
    const del = await fetch("/v1/policies/api", { method: "DELETE", headers });
    return [put.status, del.status];`);
  assert.deepEqual(forged, [403, 403], "the server refuses the viewer's forged writes");
  assert.equal((await api(adminToken, "GET", "/v1/policies/api")).body.version, 1, "nothing changed");
  // A lease policy's page: a key's holders and its queue, in turn order.
  await go("#/apps/web/policies/reports", `document.getElementById("lease-key")`);
  assert.match(await text("#details"), /4 at once, leases of 5 min, in the order asked/);
  await type("#lease-key", "doc");
  await click("#lease-show");
  await until(`document.getElementById("lease-queue")`, "the key's holders and queue");
  const cells = (table) => run(`return [...document.querySelectorAll("${table} tbody tr")]
    .map((r) => [...r.cells].slice(0, 3).map((c) => c.textContent));`);
  assert.deepEqual(await cells("#lease-holders"), [["reader-1", "shared", String((await lease("reader-1")).body.token)]]);
  assert.deepEqual(await cells("#lease-queue"), [["1", "writer", "exclusive"], ["2", "reader-2", "shared"]]);
  await accessible("leases");
  await screenshots("leases");

  // 2. The owner creates a policy; the preview follows the rate; a 422 is shown by its field.
  await signIn(owner);
  await go("#/apps/web", `document.getElementById("new-policy")`);
  await accessible("app (owner)");
  await screenshots("app-owner");
  await click("#new-policy");
  await until(`document.getElementById("preview-chart")`, "the preview");
  await type("#f-name", "search");
  await type("#f-capacity", 10);
  await type("#f-rate", 5);
  /** The preview's admitted count once it shows `words`. */
  const admitted = async (words) => {
    await until(`document.getElementById("preview-chart")?.dataset.policy === ${JSON.stringify(words)}`, `the preview of ${words}`);
    return run(`return Number(document.getElementById("preview-chart").dataset.admitted);`);
  };
  const atFive = await admitted("bursts of 10, 5 per second");
  await type("#f-rate", 2);
  const atTwo = await admitted("bursts of 10, 2 per second");
  console.log(`preview: ${atFive} admitted at 5/s, ${atTwo} at 2/s`);
  assert.ok(atTwo < atFive, `fewer admitted at 2 per second (${atTwo}) than at 5 (${atFive})`);
  // The other traffic: bursts of 20 every second, then Poisson arrivals at 10 per second.
  await click('#t-kind option[value="burst"]');
  await type("#t-size", 20);
  await until(`document.getElementById("summary")?.textContent.includes("of 200 admitted")`, "the bursts' preview");
  await click('#t-kind option[value="poisson"]');
  await until(`!document.getElementById("summary")?.textContent.includes("of 200 admitted")`, "the Poisson preview");
  console.log("Poisson:", (await text("#summary")).replace(/\s+/g, " ").trim());
  assert.equal(await run(`return document.getElementById("preview-error");`), null);
  await click('#t-kind option[value="steady"]');
  await admitted("bursts of 10, 2 per second");
  await accessible("new policy");
  await screenshots("editor");
  await type("#f-capacity", 0);
  await until(`document.getElementById("preview-error")`, "the preview's message");
  await click("#save");
  await until(`document.getElementById("e-capacity").textContent !== ""`, "the 422 next to capacity");
  console.log("422:", await text("#e-capacity"));
  assert.equal(await run(`return document.getElementById("f-capacity").getAttribute("aria-invalid");`), "true");
  await screenshots("editor-422");
  await type("#f-capacity", 4);
  await click("#save");
  await until(`location.hash === "#/apps/web/policies/search" && document.getElementById("editor")?.querySelector("h2")?.textContent.includes("version 1")`, "the created policy");

  // A composite: its limits edited as JSON, previewed, created.
  await go("#/apps/web/new", `document.getElementById("preview-chart")`);
  await type("#f-name", "combo");
  await click('#f-algorithm option[value="composite"]');
  await type("#f-limits", "[{");
  await until(`document.getElementById("preview-error")?.textContent.includes("limits")`, "the preview's message on bad JSON");
  await type("#f-limits", JSON.stringify([
    { algorithm: "token-bucket", capacity: 5, rate: 3, period: "1s" },
    { algorithm: "fixed-window", limit: 20, period: "10s" },
  ]));
  await admitted("bursts of 5, 3 per second and 20 per 10 s (fixed windows)");
  await click("#save");
  await until(`location.hash === "#/apps/web/policies/combo" && document.getElementById("editor")`, "the created composite");
  const combo = (await api(owner, "GET", "/v1/policies/combo")).body;
  assert.deepEqual([combo.algorithm, combo.limits?.length], ["composite", 2]);

  // A calendar window: its calendar, time zone and overdraft edited, a bad zone's 422 shown
  // by its field (and the preview's message), created and read back.
  await go("#/apps/web/new", `document.getElementById("preview-chart")`);
  await type("#f-name", "monthly");
  await click('#f-algorithm option[value="calendar-window"]');
  await until(`!document.querySelector('[data-field="calendar"]').hidden && document.querySelector('[data-field="period"]').hidden`, "the calendar's fields");
  await type("#f-limit", 10000);
  await click('#f-calendar option[value="month"]');
  await type("#f-time-zone", "Europe/Atlantis");
  await type("#f-overdraft", 500);
  await until(`document.getElementById("preview-error")?.textContent.includes('does not know "Europe/Atlantis"')`, "the unknown zone's preview message");
  await click("#save");
  await until(`document.getElementById("e-time-zone").textContent !== ""`, "the 422 next to the time zone");
  console.log("422:", await text("#e-time-zone"));
  assert.equal(await run(`return document.getElementById("f-time-zone").getAttribute("aria-invalid");`), "true");
  await type("#f-time-zone", "Europe/Berlin");
  await click("#save");
  await until(`location.hash === "#/apps/web/policies/monthly" && document.getElementById("editor")?.querySelector("h2")?.textContent.includes("version 1")`, "the created calendar window");
  const shownCalendar = await run(`return ["algorithm", "limit", "calendar", "time-zone", "overdraft"].map((f) => document.getElementById("f-" + f).value);`);
  assert.deepEqual(shownCalendar, ["calendar-window", "10000", "month", "Europe/Berlin", "500"], "the editor shows the saved calendar window");
  await accessible("calendar window");
  await screenshots("editor-calendar");
  const monthly = (await api(owner, "GET", "/v1/policies/monthly")).body;
  assert.deepEqual(
    [monthly.algorithm, monthly.limit, monthly.calendar, monthly["time-zone"], monthly.overdraft, monthly.apps, monthly.period],
    ["calendar-window", 10000, "month", "Europe/Berlin", 500, ["web"], undefined],
  );
  const inMonth = await api(webToken, "POST", "/v1/decide", { policy: "monthly", key: "acme" });
  assert.deepEqual([inMonth.body.allowed, inMonth.body.limit, inMonth.body.remaining], [true, 10000, 9999]);
  // A setting the form does not show (shadow, set through the API) survives a save from the page.
  const settings = { ...monthly, shadow: true };
  for (const metadata of ["name", "version", "created_by", "updated_by", "created_at", "updated_at"]) delete settings[metadata];
  const shadowed = await api(adminToken, "PUT", "/v1/policies/monthly", settings, { "If-Match": '"1"' });
  assert.equal(shadowed.status, 200, JSON.stringify(shadowed.body));
  await go("#/apps/web", `document.getElementById("policies")`);
  assert.match(await text("#policies"), /10000 per calendar month in Europe\/Berlin, reported costs up to 500 beyond/);
  await go("#/apps/web/policies/monthly", `document.querySelector("#editor h2")?.textContent === "Edit (version 2)"`);
  await click('#f-calendar option[value="week"]');
  await click("#save");
  await until(`document.getElementById("status").textContent.includes("version 3")`, "the calendar window's edit");
  const weekly = (await api(owner, "GET", "/v1/policies/monthly")).body;
  assert.deepEqual([weekly.calendar, weekly["time-zone"], weekly.shadow], ["week", "Europe/Berlin", true]);

  // A calendar window previewed in Chromium's own zone data, Chromium's zone set to New
  // York: the preview runs from the start of today there, in bins of its days, admitting
  // and denying what `sluicegate replay` does at those times. The page's periods (its
  // own module, run here) are the core's, 1970's 23-hour 26 April among them.
  await call("POST", "/goog/cdp/execute", { cmd: "Emulation.setTimezoneOverride", params: { timezoneId: "America/New_York" } });
  await go("#/apps/web/new", `document.getElementById("preview-chart")`);
  await click('#f-algorithm option[value="calendar-window"]');
  await type("#f-limit", 46);
  await click('#f-calendar option[value="day"]');
  await type("#f-time-zone", "America/New_York");
  await click('#t-kind option[value="burst"]');
  await type("#t-size", 1);
  await type("#t-every", "30m");
  await type("#t-duration", "7d");
  const daily = "46 per calendar day in America/New_York";
  await until(`document.getElementById("preview-chart")?.dataset.policy === ${JSON.stringify(daily)} && document.getElementById("summary").textContent.includes("of 336 admitted")`, "the calendar window's preview");
  const previewed = await run(`const chart = document.getElementById("preview-chart");
    const start = Number(chart.dataset.startMs);
    const day = new Intl.DateTimeFormat(undefined, { timeZone: "America/New_York", month: "short", day: "numeric" });
    return {
      start, admitted: Number(chart.dataset.admitted), denied: Number(chart.dataset.denied),
      labels: [...chart.querySelectorAll("svg > text")].map((t) => t.textContent),
      today: day.format(start), bars: chart.querySelectorAll("rect.admitted").length,
    };`);
  console.log("calendar preview:", previewed);
  const newYork = (at) => calendarBoundaries("day", "America/New_York", at, at)[0];
  assert.equal(newYork(previewed.start), previewed.start, "the preview starts at a day's start in New York");
  assert.ok(Date.now() - previewed.start < 25 * 3_600_000, `the preview starts today, not at ${new Date(previewed.start).toISOString()}`);
  assert.ok(previewed.labels.includes("requests per day") && previewed.labels.includes(previewed.today), "bins of days, labelled by date");
  assert.ok(previewed.bars === 7 || previewed.bars === 8, `a bar per day (8 across a DST change): ${previewed.bars}`);
  const times = Array.from({ length: 336 }, (_, k) => previewed.start * 1000 + k * 1_800_000_000);
  const cliCounts = replayed('algorithm = "calendar-window"\nlimit = 46\ncalendar = "day"\ntime-zone = "America/New_York"', times);
  assert.deepEqual({ admitted: previewed.admitted, denied: previewed.denied }, cliCounts, "the calendar window's preview is the CLI's replay of its times");
  assert.match(await text("#summary"), /in America\/New_York, this browser's time zone, in calendar periods from its time-zone data/);
  const periods = await run(`const { calendarBoundaries } = await import("/assets/calendar.js");
    return calendarBoundaries("day", "America/New_York", 0, 120 * 86400000);`);
  assert.ok(Array.isArray(periods), JSON.stringify(periods));
  const { got, want } = corePeriods("day", "America/New_York", periods, 0);
  assert.deepEqual(got, want, "the page's calendar periods in Chromium are the core's");
  assert.ok(periods.some((at, i) => i > 0 && at - periods[i - 1] === 23 * 3_600_000), "a 23-hour day among them");
  await screenshots("preview-calendar");
  await call("POST", "/goog/cdp/execute", { cmd: "Emulation.setTimezoneOverride", params: { timezoneId: "" } });

  // The decision API decides with the new policy: 4 at once, then denied.
  // (One call, then four in one batch: well inside the half second a token takes to return.)
  const one = await api(webToken, "POST", "/v1/decide", { policy: "search", key: "k" });
  assert.equal(one.body.allowed, true);
  assert.equal(one.body.limit, 4);
  assert.match(one.headers.get("ratelimit-policy"), /"search";q=4;w=/);
  const batch = await api(webToken, "POST", "/v1/decide/batch", {
    requests: Array.from({ length: 4 }, () => ({ policy: "search", key: "k" })),
  });
  assert.deepEqual(batch.body.decisions.map((d) => d.allowed), [true, true, true, false]);

  // 3. A second tab saves first; this tab's save gets the 409, sees the newer version, retries.
  const first = await call("GET", "/window");
  await go("#/apps/web/policies/search", `document.getElementById("editor")`);
  const second = (await call("POST", "/window/new", { type: "tab" })).handle;
  await call("POST", "/window", { handle: second });
  await signIn(owner);
  await go("#/apps/web/policies/search", `document.getElementById("editor")`);
  await type("#f-capacity", 6);
  await click("#save");
  await until(`document.getElementById("status").textContent.includes("version 2")`, "the second tab's save");
  const edited = await api(webToken, "POST", "/v1/decide", { policy: "search", key: "k2" });
  assert.equal(edited.body.limit, 6, "the decision API decides with the edited policy");
  await call("POST", "/window", { handle: first });
  await type("#f-rate", 3);
  await click("#save");
  await until(`document.getElementById("conflict-box")`, "the 409");
  const conflict = await text("#conflict-box");
  console.log("409:", conflict.replace(/\s+/g, " ").trim());
  assert.match(conflict, /olivia[\s\S]*version 2[\s\S]*bursts of 6, 2 per second/);
  await screenshots("conflict");
  await click("#retry");
  await until(`document.getElementById("status").textContent.includes("version 3")`, "the retried save");
  const saved = (await api(owner, "GET", "/v1/policies/search")).body;
  assert.deepEqual([saved.version, saved.capacity, saved.rate], [3, 4, 3], "the retry saved this tab's values");

  // 4. The audit view shows the creation and both changes, newest first.
  await go("#/apps/web/audit", `document.getElementById("audit")`);
  const rows = await run(`return [...document.querySelectorAll("#audit tbody tr")].map((r) => r.textContent.replace(/\\s+/g, " ").trim());`);
  console.log("audit:", rows);
  const search = rows.filter((row) => row.includes("search"));
  assert.equal(search.length, 3, "create and two updates of search");
  assert.match(search[0], /olivia update search.*bursts of 6, 2 per second.*bursts of 4, 3 per second/);
  assert.match(search[1], /olivia update search.*bursts of 4, 2 per second.*bursts of 6, 2 per second/);
  assert.match(search[2], /olivia create search/);
  assert.ok(!rows.some((row) => row.includes("invoices")), "nothing of an app olivia has no role in");
  await accessible("audit");
  await screenshots("audit");
  await call("DELETE", "/window");
  await call("POST", "/window", { handle: second });

  // 5. The second tab, still at version 2: its save gets the 409; it loads version 3 instead,
  // then deletes the policy (asked to confirm first).
  await type("#f-rate", 7);
  await click("#save");
  await until(`document.getElementById("conflict-box")`, "the second 409");
  await click("#load-theirs");
  await until(`document.querySelector("#editor h2")?.textContent === "Edit (version 3)"`, "version 3 loaded");
  const loaded = await run(`return ["capacity", "rate"].map((f) => document.getElementById("f-" + f).value);`);
  assert.deepEqual(loaded, ["4", "3"], "the form holds version 3");
  await click("#delete");
  assert.equal(await run(`return document.getElementById("confirm-delete").hidden;`), false);
  await click("#delete-yes");
  await until(`location.hash === "#/apps/web" && document.getElementById("policies")`, "back to the app");
  assert.doesNotMatch(await text("#policies"), /search/);
  assert.equal((await api(owner, "GET", "/v1/policies/search")).status, 404, "deleted");

  // Without WebAssembly (the module blocked), the preview says so and the rest works.
  await call("POST", "/goog/cdp/execute", { cmd: "Network.enable", params: {} });
  await call("POST", "/goog/cdp/execute", { cmd: "Network.setBlockedURLs", params: { urls: ["*.wasm"] } });
  await run(`location.hash = "#/apps/web/policies/api"; return true;`);
  await call("POST", "/refresh", {});
  await until(`document.getElementById("preview-error")?.textContent.includes("did not load")`, "the preview's message without wasm");
  assert.ok(await run(`return document.getElementById("editor") !== null;`), "the form still works");
  await call("POST", "/goog/cdp/execute", { cmd: "Network.setBlockedURLs", params: { urls: [] } });

  // Sign-in, last: with a bad token, the message.
  await run("sessionStorage.clear(); location.hash = '#/'; location.reload(); return true;");
  await until(`document.getElementById("token")`);
  await type("#token", "sgu_not-a-token");
  await click('#sign-in button[type="submit"]');
  await until(`document.getElementById("token-error")`, "the sign-in error");
  await type("#token", webToken);
  await click('#sign-in button[type="submit"]');
  await until(`document.getElementById("token-error")?.textContent.includes("not an app token")`, "the app token's message");
  await accessible("sign-in");
  await screenshots("sign-in");
  // No script error anywhere on the way (refused requests are logged too: those were expected).
  const errors = (await call("POST", "/se/log", { type: "browser" }))
    .filter((entry) => entry.level === "SEVERE" && !/Failed to load resource/.test(entry.message));
  assert.deepEqual(errors, [], "no errors in the page's console");
  console.log(`page e2e: all passed; screenshots in ${shots}`);
} finally {
  await browser?.close();
  server.kill();
  rmSync(data, { recursive: true, force: true });
}
