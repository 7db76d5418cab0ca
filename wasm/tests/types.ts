// The package's TypeScript types, checked by `tsc` (scripts/test.sh): what a user writes
// must type-check, and misuse must not (each `@ts-expect-error` fails the check if the
// line below it compiles).
import init, { Limiter, Throttle, type ClientOptions, type Decision } from "../pkg/client/index.js";
import * as full from "../pkg/full/index.js";

export async function usage(): Promise<void> {
  await init();
  const options: ClientOptions = { algorithm: "token-bucket", capacity: 5, rate: 5, periodMs: 1000 };
  const limiter = new Limiter(options);
  const decision: Decision = limiter.check();
  const retry: number | null = decision.retryAfterMs;
  const admitted: boolean = limiter.admit(1);
  const remaining: number = limiter.last.remaining;
  limiter.peek(2, Date.now());
  limiter.reserve(1, 500);
  limiter.load(limiter.save());
  limiter.reset();
  using disposed = new Limiter(options);

  const throttle = new Throttle({ ...options, maxQueued: 10 });
  const response: Response = await throttle.schedule(() => fetch("/api"), { cost: 1 });
  throttle.observe(response);
  throttle.observe(new Headers());
  const queued: number = throttle.queued;

  await full.default();
  const daily = new full.Limiter({ algorithm: "calendar-window", limit: 5, calendar: "day", timeZone: "Europe/Berlin", boundariesMs: [0, 82_800_000] });
  const reported: full.Reported = daily.report(-1);
  const recorded: number = reported.recorded + reported.dropped;
  const composite: full.LimiterOptions = { algorithm: "composite", members: [options, { ...options, overdraft: 2 }] };
  new full.Throttle({ ...composite, maxQueued: 5 });
  void [retry, admitted, remaining, queued, disposed, recorded];

  // @ts-expect-error: an unknown algorithm
  new Limiter({ algorithm: "leaky", capacity: 1, rate: 1, periodMs: 1 });
  // @ts-expect-error: composites are the full module's
  new Limiter(composite);
  // @ts-expect-error: so are overdrafts
  new Limiter({ ...options, overdraft: 1 });
  // @ts-expect-error: and reports
  limiter.report(1);
  // @ts-expect-error: boundaries are numbers
  new full.Limiter({ algorithm: "calendar-window", limit: 5, calendar: "day", boundariesMs: ["1970-01-02"] });
  // @ts-expect-error: reserve needs its cost and wait
  limiter.reserve();
  // @ts-expect-error: the wasm half is not exported
  full.LimiterCore;
}
