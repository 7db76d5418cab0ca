// A client that throttles itself with sluicegate-wasm and obeys the server's pushback.
// Run after `bash scripts/build-wasm.sh`: `node wasm/examples/throttle.mjs`.
//
// A local HTTP server stands in for an API; its fourth request is answered with 429 and
// `Retry-After: 1`. The client sends six requests through a throttle of 2 at once, 2 per
// second: the first two go at once, the next ones half a second apart, and after the
// 429 the queue pauses for the second the server asked for.
import { createServer } from "node:http";
import { Throttle } from "../pkg/client/node.js";

let served = 0;
const server = createServer((_request, response) => {
  served += 1;
  if (served === 4) {
    response.writeHead(429, { "Retry-After": "1" }).end();
  } else {
    response.writeHead(200).end("ok");
  }
});
await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
const url = `http://127.0.0.1:${server.address().port}/`;

const throttle = new Throttle({ algorithm: "token-bucket", capacity: 2, rate: 2, periodMs: 1000 });
const start = performance.now();
const calls = [];
for (let i = 1; i <= 6; i++) {
  calls.push(
    throttle.schedule(async () => {
      const sentAt = Math.round(performance.now() - start);
      const response = await fetch(url);
      throttle.observe(response); // Retry-After pauses the queue
      console.log(`request ${i}: sent at ${sentAt} ms, status ${response.status}`);
      return response.status;
    }),
  );
}
const statuses = await Promise.all(calls);
server.close();
if (statuses.filter((s) => s === 429).length !== 1) {
  throw new Error(`expected one 429, got ${statuses}`);
}
