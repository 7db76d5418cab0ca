// End-to-end: the demo page in real headless Chromium, driven over WebDriver by
// chromedriver (scripts/webdriver.mjs), served with the web package from a loopback
// server this script runs.
// Run after scripts/build-wasm.sh: `node wasm/e2e/e2e.mjs`.
import { readFile } from "node:fs/promises";
import { createServer } from "node:http";
import { extname, join, normalize } from "node:path";
import { fileURLToPath } from "node:url";
import assert from "node:assert/strict";
import { startBrowser } from "../../scripts/webdriver.mjs";

const root = fileURLToPath(new URL("..", import.meta.url));
const types = { ".html": "text/html", ".js": "text/javascript", ".wasm": "application/wasm" };

// The demo, the package, and two endpoints: /api/ping answers 200; /api/busy answers
// 429 with `Retry-After: 1` the first time.
let busyHits = 0;
const server = createServer(async (request, response) => {
  const path = new URL(request.url, "http://loopback").pathname;
  if (path === "/api/ping") return response.end("pong");
  if (path === "/api/busy") {
    busyHits += 1;
    response.writeHead(busyHits === 1 ? 429 : 200, { "Retry-After": "1" });
    return response.end();
  }
  const file = normalize(join(root, path));
  if (!file.startsWith(root)) return response.writeHead(403).end();
  try {
    const body = await readFile(file);
    response.writeHead(200, { "Content-Type": types[extname(file)] ?? "application/octet-stream" });
    response.end(body);
  } catch {
    response.writeHead(404).end();
  }
});
await new Promise((ready) => server.listen(0, "127.0.0.1", ready));
const site = `http://127.0.0.1:${server.address().port}`;

const browser = await startBrowser();
try {
  /** Runs `body` (an async function's source, given `demo`) in the page. */
  const run = (body) => browser.run(`const demo = window.demo; ${body}`);
  const open = async () => {
    await browser.call("POST", "/url", { url: `${site}/demo/index.html` });
    await run("while (!window.demo) await new Promise((r) => setTimeout(r, 10)); return true;");
  };

  await open();
  await run("localStorage.clear(); return true;");
  await open();

  // 1. Five calls through a bucket of 2 refilled 2/s: two at once, then one each time a
  // token is back, so call k (from 0) runs (k - 1) × 500 ms after the throttle's first
  // decision. Offsets count from just before the calls are scheduled, which is no later
  // than that decision, on the clock the throttle reads (performance.now()).
  const [start, times] = await run(`
    const start = performance.now();
    return [start, await Promise.all(Array.from({ length: 5 }, () => demo.call("/api/ping")))];`);
  const offsets = times.map((t) => t - start);
  console.log("runs after scheduling (ms):", offsets.map((g) => g.toFixed(1)).join(", "));
  // The first two run in the throttle's first pump, before a third token could be back.
  assert.ok(offsets[1] < 400, `the first two run together: ${offsets}`);
  offsets.slice(2).forEach((offset, i) => {
    const due = (i + 1) * 500;
    // Early only by Chromium's coarsened clock (5 ms; a bucket refilled twice as fast runs 250 ms early).
    assert.ok(offset >= due - 5, `call ${i + 2} due at ${due} ms: ${offsets}`);
  });
  // Late by up to 1.4 s on a loaded machine; a bucket refilled at half the rate runs the last at 3 s.
  assert.ok(offsets[4] < 1500 + 1400, `the last call due at 1500 ms: ${offsets}`);

  // 2. Abort: waiting calls reject with the signal's reason and never run.
  const aborted = await run(`
    const calls = Array.from({ length: 4 }, () => demo.call("/api/ping").then(() => "ran", (e) => e.name));
    demo.cancel();
    return [await Promise.all(calls), demo.throttle.queued];`);
  console.log("abort:", JSON.stringify(aborted));
  assert.deepEqual(aborted[1], 0);
  assert.ok(aborted[0].filter((r) => r === "AbortError").length >= 2, JSON.stringify(aborted));

  // 3. A 429 with Retry-After: 1 pauses the queue for a second.
  await run("await new Promise((r) => setTimeout(r, 1100)); return true;");
  const [sincehit, sinceseen] = await run(`
    const hit = await demo.call("/api/busy");
    const seen = performance.now();
    const next = await demo.call("/api/ping");
    return [next - hit, next - seen];`);
  console.log("pause after 429 (ms):", sincehit.toFixed(1), "after it was seen:", sinceseen.toFixed(1));
  // The busy call started before its 429 was read, so the next one waits at least 1 s from
  // it (5 ms for Chromium's coarsened clock; a Retry-After ignored runs it at once).
  assert.ok(sincehit >= 995, `paused ${sincehit} ms`);
  // Seen after the 429 was read: seconds late at most on a loaded machine; a Retry-After read
  // as minutes would hold it a minute.
  assert.ok(sinceseen < 5000, `paused ${sinceseen} ms after the 429 was seen`);

  // 4. The state survives a reload: drain the bucket, reload, and the page restores the
  // bytes (a fresh state saves as none) and waits as they say, checked on its own clock.
  const before = await run(`
    await Promise.all([demo.call("/api/ping"), demo.call("/api/ping")]);
    return Array.from(demo.throttle.save());`);
  await open();
  const [after, due, waited] = await run(`
    const { Limiter } = await import("/pkg/client/index.js");
    const loaded = Array.from(demo.throttle.save());
    const probe = new Limiter({ algorithm: "token-bucket", capacity: 2, rate: 2, periodMs: 1000 });
    probe.load(Uint8Array.from(loaded));
    const start = performance.now();
    const due = probe.peek(1).retryAfterMs;
    const ran = await demo.call("/api/ping");
    return [loaded, due, ran - start];`);
  console.log("reload: the restored state says wait (ms):", due, "waited:", waited.toFixed(1));
  assert.ok(before.length > 0);
  assert.deepEqual(after, before, "the reloaded page restores the saved bytes");
  // Measured from before the probe read the throttle's clock, so exact but for Chromium's
  // coarsened clock (5 ms; a state not restored runs the call at once).
  assert.ok(waited >= due - 5, `the call waits as the restored state says: ${waited} < ${due} ms`);

  // 5. Invalid input from JS throws an Error with a message; the module keeps working.
  const thrown = await run(`
    const { Limiter } = await import("/pkg/client/index.js");
    const messages = [];
    for (const attempt of [
      () => new Limiter({ algorithm: "token-bucket", capacity: -1, rate: 1, periodMs: 1000 }),
      () => new Limiter("fixed-window"),
      () => new Limiter({ algorithm: "fixed-window", limit: 1, periodMs: 1000 }).check(0.5),
      () => demo.throttle.load(new Uint8Array([1, 4, 0])),
    ]) {
      try { attempt(); messages.push("no error"); }
      catch (e) { messages.push(e instanceof Error ? e.message : "not an Error"); }
    }
    messages.push(new Limiter({ algorithm: "fixed-window", limit: 1, periodMs: 1000 }).check().allowed);
    return messages;`);
  console.log("errors:", JSON.stringify(thrown));
  assert.match(thrown[0], /capacity must be a whole number/);
  assert.match(thrown[1], /options must be an object/);
  assert.match(thrown[2], /cost must be a whole number/);
  assert.match(thrown[3], /cannot load the saved state/);
  assert.equal(thrown[4], true);

  // 6. A cost reported after the work: charged within the overdraft, refunded, refused on pacing.
  const reports = await run(`
    const { default: init, Limiter } = await import("/pkg/full/index.js");
    await init();
    const limiter = new Limiter({ algorithm: "fixed-window", limit: 3, periodMs: 1000, overdraft: 2 });
    limiter.check(1, 0);
    const charged = limiter.report(9, 10);
    const denied = limiter.check(1, 10).allowed;
    const refunded = limiter.report(-7, 20);
    let pacing;
    try { new Limiter({ algorithm: "pacing", capacity: 1, rate: 1, periodMs: 1000 }).report(1, 0); pacing = "no error"; }
    catch (e) { pacing = e instanceof Error ? e.message : "not an Error"; }
    return [charged, denied, refunded, pacing];`);
  console.log("reports:", JSON.stringify(reports));
  assert.deepEqual(reports[0], {
    recorded: 4, dropped: 5, allowed: false, limit: 3, remaining: 0, retryAfterMs: 990, resetAfterMs: 990, delayMs: 0,
  });
  assert.equal(reports[1], false, "in debt until the window ends");
  assert.deepEqual([reports[2].recorded, reports[2].dropped, reports[2].remaining], [5, 2, 3]);
  assert.match(reports[3], /take no reports/);
  console.log("e2e: all passed");
} finally {
  await browser.close();
  server.close();
}
