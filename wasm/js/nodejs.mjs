// The Node.js package's entry (index.mjs); `require` loads it too (Node.js 20.19 or later).
export { Throttle } from "./sluicegate_wasm.js";
export { Limiter } from "./limiter.mjs";
