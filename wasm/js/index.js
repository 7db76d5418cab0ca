// The entry for browsers and bundlers: call the default export (`init`) once before
// constructing anything.
export { default, initSync } from "./sluicegate_wasm.js";
export { Limiter, Throttle } from "./limiter.js";
