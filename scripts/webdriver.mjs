// Headless Chromium driven over WebDriver by chromedriver, for the browser end-to-end
// tests (wasm/e2e, server/web/e2e). No client library: WebDriver is JSON over HTTP.
import { spawn } from "node:child_process";
import { createServer } from "node:net";

/** A free loopback port (taken from a throwaway listener). */
export function freePort() {
  return new Promise((found, fail) => {
    const probe = createServer().listen(0, "127.0.0.1", () => {
      const { port } = probe.address();
      probe.close(() => found(port));
    });
    probe.on("error", fail);
  });
}

/** Resolves after `ms` milliseconds. */
export const sleep = (ms) => new Promise((done) => setTimeout(done, ms));

/**
 * Starts chromedriver and a headless Chromium session. Returns `{ call, run, close }`:
 * `call(method, path, body)` sends a WebDriver command of the session (path after
 * `/session/ID`, "" for the session itself) and returns its value; `run(body)` runs the
 * source of an async function's body in the page and returns what it returns (a thrown
 * error comes back as `{ error }`); `close()` ends the session and the driver.
 */
export async function startBrowser() {
  const port = await freePort();
  const driver = spawn("chromedriver", [`--port=${port}`, "--allowed-ips=127.0.0.1"], { stdio: "ignore" });
  const base = `http://127.0.0.1:${port}`;
  const webdriver = async (method, path, body) => {
    const response = await fetch(base + path, {
      method,
      headers: { "Content-Type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const reply = await response.json();
    if (!response.ok) throw new Error(`${method} ${path}: ${JSON.stringify(reply.value)}`);
    return reply.value;
  };
  let session;
  try {
    for (let attempt = 0; ; attempt++) {
      try {
        if ((await webdriver("GET", "/status")).ready) break;
      } catch (error) {
        if (attempt > 100) throw error;
      }
      await sleep(100);
    }
    session = (
      await webdriver("POST", "/session", {
        capabilities: {
          alwaysMatch: {
            // The page's console, read with `call("POST", "/se/log", { type: "browser" })`.
            "goog:loggingPrefs": { browser: "ALL" },
            "goog:chromeOptions": {
              binary: "/usr/bin/chromium",
              args: [
                "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
              ],
            },
          },
        },
      })
    ).sessionId;
  } catch (error) {
    driver.kill();
    throw error;
  }
  const call = (method, path, body) => webdriver(method, `/session/${session}${path}`, body);
  return {
    call,
    run: (body) =>
      call("POST", "/execute/async", {
        script: `const done = arguments[arguments.length - 1];
          (async () => { ${body} })().then(done, (e) => done({ error: String(e) }));`,
        args: [],
      }),
    close: async () => {
      await webdriver("DELETE", `/session/${session}`).catch(() => {});
      driver.kill();
    },
  };
}
