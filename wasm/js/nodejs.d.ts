export type * from "./sluicegate_wasm.js";
export { Throttle } from "./sluicegate_wasm.js";
export { Limiter, type Reported } from "./limiter.js";
