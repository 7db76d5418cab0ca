// The npm package as it would be published: `npm pack` of wasm/pkg, installed from the
// tarball into a scratch project, its Node.js entries run and its browser entry bundled
// by esbuild (from wasm/node_modules), which must keep the client entry at the client
// module and its glue. Run after scripts/build-wasm.sh: `node --test wasm/tests/pack.test.mjs`.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import { gzipSync } from "node:zlib";

const wasm = fileURLToPath(new URL("..", import.meta.url));
const pkg = join(wasm, "pkg");
const manifest = JSON.parse(readFileSync(join(pkg, "package.json"), "utf8"));
let scratch;
let packed;

before(() => {
  scratch = mkdtempSync(join(tmpdir(), "sluicegate-wasm-pack-"));
  const [report] = JSON.parse(execFileSync("npm", ["pack", "--json", "--pack-destination", scratch], { cwd: pkg }));
  packed = report;
  writeFileSync(join(scratch, "package.json"), JSON.stringify({ name: "scratch", private: true, type: "module" }));
  // A local tarball: nothing is fetched.
  execFileSync("npm", ["install", "--no-audit", "--no-fund", "--loglevel=error", `./${report.filename}`], { cwd: scratch });
});

after(() => rmSync(scratch, { recursive: true, force: true }));

test("the tarball holds both modules, their types, the README and the licences, nothing else", () => {
  const files = packed.files.map((f) => f.path).sort();
  for (const module of ["client", "full"]) {
    for (const file of ["index.js", "node.js", "index.d.ts", "limiter.js", "limiter.d.ts", "feedback.js", "options.d.ts", "sluicegate_wasm.js", "sluicegate_wasm.d.ts", "sluicegate_wasm_bg.wasm"]) {
      assert.ok(files.includes(`${module}/${file}`), `${module}/${file} is packed`);
    }
  }
  for (const file of ["README.md", "LICENSE-MIT", "LICENSE-APACHE", "package.json"]) assert.ok(files.includes(file), file);
  assert.deepEqual(files.filter((f) => !/^(client|full)\/|^(README\.md|LICENSE-MIT|LICENSE-APACHE|package\.json)$/.test(f)), []);
  assert.equal(packed.name, "sluicegate-wasm");
});

test("the exports map: the client as '.', the full module as './full', types first", () => {
  assert.equal(manifest.license, "MIT OR Apache-2.0");
  assert.equal(manifest.type, "module");
  for (const [subpath, module] of [[".", "client"], ["./full", "full"]]) {
    assert.deepEqual(Object.keys(manifest.exports[subpath]), ["types", "node", "default"]);
    assert.deepEqual(manifest.exports[subpath], {
      types: `./${module}/index.d.ts`, node: `./${module}/node.js`, default: `./${module}/index.js`,
    });
  }
});

test("the README states the client's size within its budget and the speed ratio", () => {
  const readme = readFileSync(join(pkg, "README.md"), "utf8");
  const size = readme.match(/client module is ([\d ]+) bytes gzipped/);
  assert.ok(size, "the README states the client module's gzipped size");
  assert.ok(Number(size[1].replaceAll(" ", "")) <= 20_480, size[0]);
  assert.match(readme, /check\(\)[^\n]*\d\.\d\dx/, "the README states check()'s ratio to plain JS");
});

test("the Node.js entries load from the installed tarball, by import and require", () => {
  const script = `
    import { Limiter, Throttle } from "sluicegate-wasm";
    import * as full from "sluicegate-wasm/full";
    import { createRequire } from "node:module";
    const client = new Limiter({ algorithm: "token-bucket", capacity: 2, rate: 1, periodMs: 1000 });
    const composite = new full.Limiter({ algorithm: "composite", members: [{ algorithm: "fixed-window", limit: 1, periodMs: 1000 }] });
    const required = createRequire(import.meta.url)("sluicegate-wasm");
    console.log(JSON.stringify([client.check(1, 0).remaining, composite.check(1, 0).allowed, composite.check(1, 0).allowed,
      required.Limiter === Limiter, typeof Throttle]));`;
  writeFileSync(join(scratch, "node.mjs"), script);
  const out = execFileSync("node", ["node.mjs"], { cwd: scratch, encoding: "utf8" });
  assert.deepEqual(JSON.parse(out), [1, true, false, true, "function"]);
});

test("esbuild bundles the browser entry to the client module and its glue, and it runs", () => {
  writeFileSync(join(scratch, "app.js"), `
    import { initSync, Limiter } from "sluicegate-wasm";
    export function start(bytes) {
      initSync({ module: bytes });
      return new Limiter({ algorithm: "fixed-window", limit: 1, periodMs: 1000 }).check(1, 0);
    }`);
  const esbuild = join(wasm, "node_modules", ".bin", "esbuild");
  execFileSync(esbuild, ["app.js", "--bundle", "--minify", "--format=esm", "--platform=browser", "--outfile=out/app.js", "--log-level=warning"], { cwd: scratch });
  const bundle = readFileSync(join(scratch, "out", "app.js"));
  const client = join(scratch, "node_modules", "sluicegate-wasm", "client");
  const glue = ["sluicegate_wasm.js", "limiter.js", "feedback.js", "index.js"].map((f) => readFileSync(join(client, f)));
  const snippets = readdirSync(join(client, "snippets"), { recursive: true }).filter((f) => f.endsWith(".js"));
  const glueBytes = gzipSync(Buffer.concat([...glue, ...snippets.map((f) => readFileSync(join(client, "snippets", f)))])).length;
  console.log(`bundle: ${bundle.length} bytes, ${gzipSync(bundle).length} gzipped; the client's glue ${glueBytes} gzipped`);
  assert.ok(gzipSync(bundle).length <= glueBytes, "the bundle is no more than the client's glue");
  assert.ok(!bundle.includes("limitercore_report"), "nothing of the full module's glue");
  // The browser entry runs (on the client module's bytes) as bundled.
  const run = `import { start } from "./out/app.js"; import { readFileSync } from "node:fs";
    console.log(JSON.stringify(start(readFileSync("node_modules/sluicegate-wasm/client/sluicegate_wasm_bg.wasm"))));`;
  writeFileSync(join(scratch, "browser.mjs"), run);
  const decision = JSON.parse(execFileSync("node", ["browser.mjs"], { cwd: scratch, encoding: "utf8" }));
  assert.equal(decision.allowed, true);
  assert.ok(readFileSync(join(client, "sluicegate_wasm_bg.wasm")).length > 0);
});
