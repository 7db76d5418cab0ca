// The packages' TypeScript types, checked by `tsc` (scripts/test.sh): what a user writes
// must type-check, and misuse must not (each `@ts-expect-error` fails the check if the
// line below it compiles).
import init, { Limiter, Throttle, type Decision, type LimiterOptions, type Reported } from "../pkg/web/index.js";
import * as node from "../pkg/nodejs/index.js";

export async function usage(): Promise<void> {
  await init();
  const options: LimiterOptions = { algorithm: "token-bucket", capacity: 5, rate: 5, periodMs: 1000 };
  const limiter = new Limiter(options);
  const decision: Decision = limiter.check();
  const retry: number | null = decision.retryAfterMs;
  limiter.peek(2, Date.now());
  limiter.reserve(1, 500);
  const reported: Reported = limiter.report(-1);
  const recorded: number = reported.recorded + reported.dropped;
  limiter.load(limiter.save());
  limiter.reset();
  using disposed = new Limiter(options);

  const throttle = new Throttle({ ...options, maxQueued: 10 });
  const result: unknown = await throttle.schedule(() => fetch("/api"), { cost: 1 });
  throttle.observe(new Headers());
  const queued: number = throttle.queued;

  const daily = new Limiter({ algorithm: "calendar-window", limit: 5, calendar: "day", timeZone: "Europe/Berlin", boundariesMs: [0, 82_800_000] });
  const nodeDecision: Decision = new node.Limiter({ algorithm: "sliding-log", limit: 3, periodMs: 1000 }).check();
  void [retry, result, queued, nodeDecision, disposed, recorded, daily];

  // @ts-expect-error: an unknown algorithm
  new Limiter({ algorithm: "leaky", capacity: 1, rate: 1, periodMs: 1 });
  // @ts-expect-error: boundaries are numbers
  new Limiter({ algorithm: "calendar-window", limit: 5, calendar: "day", boundariesMs: ["1970-01-02"] });
  // @ts-expect-error: reserve needs its cost and wait
  limiter.reserve();
  // @ts-expect-error: report needs the adjustment
  limiter.report();
  // @ts-expect-error: the wasm half is not exported
  node.LimiterCore;
}
