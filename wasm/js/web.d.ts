export type * from "./sluicegate_wasm.js";
export { default, initSync, Throttle } from "./sluicegate_wasm.js";
export { Limiter, type Reported } from "./limiter.js";
