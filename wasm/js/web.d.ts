export type * from "./tollgate_wasm.js";
export { default, initSync, Throttle } from "./tollgate_wasm.js";
export { Limiter } from "./limiter.js";
