export type * from "./sluicegate_wasm.js";
export { Throttle } from "./sluicegate_wasm.js";
export { Limiter } from "./limiter.js";
