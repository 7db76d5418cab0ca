export type * from "./tollgate_wasm.js";
export { Throttle } from "./tollgate_wasm.js";
export { Limiter } from "./limiter.js";
