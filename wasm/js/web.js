// The web package's entry (index.js): for browsers and bundlers. Call the default export
// (`init`) once before constructing anything.
export { default, initSync, Throttle } from "./sluicegate_wasm.js";
export { Limiter } from "./limiter.js";
