// The client module (`sluicegate-wasm`): windows, buckets, pacing and the throttle.
export { default, initSync, type InitInput, type InitOutput, type SyncInitInput } from "./sluicegate_wasm.js";
export { Limiter, Throttle } from "./limiter.js";
export type { ClientOptions, Decision, ResponseLike, ScheduleOptions, ThrottleOptions } from "./options.js";
