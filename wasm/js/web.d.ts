export type * from "./sluicegate_wasm.js";
export { default, initSync, Throttle } from "./sluicegate_wasm.js";
export { Limiter } from "./limiter.js";
