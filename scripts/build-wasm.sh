#!/usr/bin/env bash
# Builds sluicegate-wasm's npm package in wasm/pkg: two modules from the one crate, each
# with its glue (wasm-bindgen's web target), the JS halves of `Limiter` and `Throttle`
# (wasm/js/limiter.js) and TypeScript types:
#   client/  the package's `.` export: windows, buckets, pacing, the throttle; at most
#            20 480 bytes gzipped
#   full/    `./full`: every algorithm, composites, bans, reports, calendar windows (the
#            management page's); at most 32 000 bytes gzipped
# Each has an entry for browsers and bundlers (index.js, after `init()`) and one for
# Node.js (node.js, initialized on import). The build fails above either budget.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/wasm-tools.sh
install_wasm_tools

# The features rustc's wasm32 target enables by default. `--low-memory-unused`: the
# module never reads below 1024 (no null pointers), which lets loads fold offsets.
features="--enable-bulk-memory --enable-mutable-globals --enable-nontrapping-float-to-int
  --enable-sign-ext --enable-reference-types --enable-multivalue"
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -1)
rm -rf wasm/pkg
mkdir -p wasm/pkg

# module, cargo features, gzipped budget in bytes.
build() {
  local module=$1 cargo_features=$2 budget=$3
  # Dependencies' source paths (in panic locations) would make the module depend on where
  # cargo keeps them: name them the same everywhere, so the page's committed copy
  # (server/web/dist/wasm) rebuilds bit for bit on any machine with the same toolchain.
  CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUSTFLAGS="--remap-path-prefix=${CARGO_HOME:-$HOME/.cargo}=/cargo" \
    cargo build -q -p sluicegate-wasm --target wasm32-unknown-unknown --profile wasm \
    --features "$cargo_features"
  local out=wasm/pkg/$module
  wasm-bindgen --target web --out-dir "$out" \
    "${CARGO_TARGET_DIR:-target}/wasm32-unknown-unknown/wasm/sluicegate_wasm.wasm"
  # shellcheck disable=SC2086
  wasm/node_modules/.bin/wasm-opt -Oz --converge --low-memory-unused --strip-producers $features "$out/sluicegate_wasm_bg.wasm" -o "$out/sluicegate_wasm_bg.wasm"
  cp wasm/js/{limiter.js,feedback.js,limiter.d.ts,options.d.ts,index.js,node.js} "$out/"
  cp "wasm/js/$module.d.ts" "$out/index.d.ts"
  local raw gzipped
  raw=$(wc -c <"$out/sluicegate_wasm_bg.wasm")
  gzipped=$(gzip -9 -c "$out/sluicegate_wasm_bg.wasm" | wc -c)
  echo "$module/sluicegate_wasm_bg.wasm: $raw bytes, $gzipped gzipped (budget $budget)"
  if [ "$gzipped" -gt "$budget" ]; then
    echo "the $module module is over its budget of $budget bytes gzipped" >&2
    exit 1
  fi
}
# The full module was 42 945 bytes gzipped when it was the only one (its budget 43 000);
# it is 29 654 without std's panic machinery, `core::fmt` and the JS values the options,
# headers and throttle no longer pass.
build client "" 20480
build full full 32000

cp wasm/README.md wasm/LICENSE-MIT wasm/LICENSE-APACHE wasm/pkg/
cat >wasm/pkg/package.json <<JSON
{
  "name": "sluicegate-wasm",
  "version": "$version",
  "description": "Client-side rate limiting for browsers and JS apps: exact limits in WebAssembly",
  "license": "MIT OR Apache-2.0",
  "repository": "github:sluicegate-rs/sluicegate",
  "keywords": ["rate-limit", "throttle", "token-bucket", "retry-after", "wasm"],
  "type": "module",
  "engines": { "node": ">=20.19" },
  "exports": {
    ".": { "types": "./client/index.d.ts", "node": "./client/node.js", "default": "./client/index.js" },
    "./full": { "types": "./full/index.d.ts", "node": "./full/node.js", "default": "./full/index.js" },
    "./package.json": "./package.json"
  },
  "types": "./client/index.d.ts",
  "files": ["client/", "full/", "README.md", "LICENSE-MIT", "LICENSE-APACHE"],
  "sideEffects": ["./client/node.js", "./full/node.js"]
}
JSON
