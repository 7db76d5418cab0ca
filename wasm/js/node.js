// The entry for Node.js (20.19 or later, by `import` or `require`): the module is
// initialized on import, from the file beside this one; `init()` resolves at once.
import { readFileSync } from "node:fs";
import { initSync } from "./sluicegate_wasm.js";

initSync({ module: readFileSync(new URL("sluicegate_wasm_bg.wasm", import.meta.url)) });

export * from "./index.js";
export { default } from "./index.js";
