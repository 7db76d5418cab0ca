#!/usr/bin/env bash
# Builds sluicegate-wasm's two packages: wasm/pkg/web (ES modules for browsers and
# bundlers) and wasm/pkg/nodejs (wasm-bindgen's CommonJS for Node.js under an ES module
# entry), each with TypeScript types, then checks the gzipped size of the optimized
# module. Both export `Limiter` from wasm/js/limiter.js (over the module's LimiterCore)
# and `Throttle` from the module.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/wasm-tools.sh
install_wasm_tools

# Dependencies' source paths (in panic locations) would make the module depend on where
# cargo keeps them: name them the same everywhere, so the page's committed copy
# (server/web/dist/wasm) rebuilds bit for bit on any machine with the same toolchain.
CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUSTFLAGS="--remap-path-prefix=${CARGO_HOME:-$HOME/.cargo}=/cargo" \
  cargo build -q -p sluicegate-wasm --target wasm32-unknown-unknown --profile wasm
module=${CARGO_TARGET_DIR:-target}/wasm32-unknown-unknown/wasm/sluicegate_wasm.wasm
# The features rustc's wasm32 target enables by default.
features="--enable-bulk-memory --enable-mutable-globals --enable-nontrapping-float-to-int
  --enable-sign-ext --enable-reference-types --enable-multivalue"
for target in web nodejs; do
  out=wasm/pkg/$target
  rm -rf "$out"
  wasm-bindgen --target "$target" --out-dir "$out" "$module"
  # shellcheck disable=SC2086
  wasm/node_modules/.bin/wasm-opt -Oz $features "$out/sluicegate_wasm_bg.wasm" -o "$out/sluicegate_wasm_bg.wasm"
  # The entry and the JS half of Limiter; `.mjs` where the package is CommonJS.
  type=commonjs js=mjs
  if [ "$target" = web ]; then type=module js=js; fi
  cp wasm/js/limiter.js "$out/limiter.$js"
  cp wasm/js/limiter.d.ts "$out/limiter.d.ts"
  cp "wasm/js/$target.$js" "$out/index.$js"
  cp "wasm/js/$target.d.ts" "$out/index.d.ts"
  # wasm-bindgen writes inline JS snippets as ES modules, which the CommonJS glue
  # `require`s: mark them as modules (Node.js 20.19 or later loads them).
  echo '{ "type": "module" }' >"$out/snippets/package.json"
  cat >"$out/package.json" <<JSON
{
  "name": "sluicegate-wasm",
  "version": "$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -1)",
  "description": "Client-side rate limiting for browsers and JS apps",
  "license": "MIT OR Apache-2.0",
  "type": "$type",
  "main": "index.$js",
  "types": "index.d.ts"
}
JSON
done

raw=$(wc -c <wasm/pkg/web/sluicegate_wasm_bg.wasm)
gzipped=$(gzip -9 -c wasm/pkg/web/sluicegate_wasm_bg.wasm | wc -c)
# The budget grew from 40 000 when reports, overdrafts and calendar windows (the zone
# database stays behind the `calendar` feature) added 4.6 KB gzipped, then from 42 000
# when calendar windows ran in every build on the caller's boundaries (41 398 to 42 945:
# the calendar window's transitions, dead code before, are most of it).
echo "sluicegate_wasm_bg.wasm: $raw bytes, $gzipped gzipped (budget 43000)"
if [ "$gzipped" -gt 43000 ]; then
  echo "the gzipped module is over its 43 KB budget" >&2
  exit 1
fi
