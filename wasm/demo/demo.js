// The demo: one Throttle for the page's calls to the server, its state kept across reloads.
import init, { Throttle } from "../pkg/client/index.js";

await init();

const STORAGE_KEY = "sluicegate-demo-state";
const throttle = new Throttle({
  algorithm: "token-bucket",
  capacity: 2,
  rate: 2,
  periodMs: 1000,
  maxQueued: 50,
});

// Restore the bucket a previous visit left (bytes in sluicegate's canonical encoding).
const saved = localStorage.getItem(STORAGE_KEY);
if (saved) {
  try {
    throttle.load(Uint8Array.from(atob(saved), (c) => c.charCodeAt(0)));
  } catch (error) {
    console.warn("ignoring a saved state sluicegate cannot read:", error.message);
  }
}
function save() {
  localStorage.setItem(STORAGE_KEY, btoa(String.fromCharCode(...throttle.save())));
}

const log = document.getElementById("log");
const queued = document.getElementById("queued");
const started = performance.now();
function note(text, denied = false) {
  const item = document.createElement("li");
  item.textContent = `${(performance.now() - started).toFixed(0).padStart(6)} ms  ${text}`;
  if (denied) item.className = "denied";
  log.append(item);
  queued.textContent = `${throttle.queued} waiting`;
}

let controller = new AbortController();

/** Fetches `path` when the throttle allows; resolves with the time the call started. */
function call(path) {
  return throttle.schedule(
    async () => {
      const at = performance.now();
      save();
      note(`GET ${path}`);
      const response = await fetch(path);
      throttle.observe(response);
      note(`${response.status} from ${path}`, !response.ok);
      return at;
    },
    { signal: controller.signal },
  );
}

function cancel() {
  controller.abort();
  controller = new AbortController();
  note("waiting calls cancelled");
}

document.getElementById("send").onclick = () => {
  for (let i = 0; i < 5; i++) call("/api/ping").catch((e) => note(e.message, true));
};
document.getElementById("busy").onclick = () => call("/api/busy").catch((e) => note(e.message, true));
document.getElementById("cancel").onclick = cancel;

// For the end-to-end test.
window.demo = { throttle, call, cancel, ready: true };
