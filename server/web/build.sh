#!/usr/bin/env bash
# Copies the wasm package the page previews with (wasm/pkg/full, the full module, from
# scripts/build-wasm.sh) into server/web/dist/wasm, which is committed: the server embeds
# dist/, so building it needs no wasm toolchain. The page's own files in dist/ are
# plain modules, served as written.
#
# --check: instead, compares a fresh copy with the committed one and fails if they
# differ (the build is deterministic: the same sources and toolchain give the same
# bytes). The module's bytes also depend on rustc, so when rustc is not the one recorded
# in server/web/wasm-rustc the module itself is not compared (a notice says so); the
# JS, whose bytes depend only on the sources and the pinned wasm-bindgen, always is.
set -euo pipefail
cd "$(dirname "$0")/../.."

package=wasm/pkg/full
if [ ! -f "$package/sluicegate_wasm_bg.wasm" ]; then
  echo "no $package: run scripts/build-wasm.sh first" >&2
  exit 1
fi

# The files a browser loads: the entry, the JS half of Limiter, wasm-bindgen's glue and
# inline snippets, and the module (no types, no package.json).
copy() {
  local out
  out=$(realpath -m "$1")
  rm -rf "$out"
  mkdir -p "$out"
  cp "$package"/{index.js,limiter.js,feedback.js,sluicegate_wasm.js,sluicegate_wasm_bg.wasm} "$out/"
  (cd "$package" && find snippets -name '*.js' -print0 | xargs -0 -I{} cp --parents {} "$out/")
}

rustc=$(rustc --version)
if [ "${1:-}" != --check ]; then
  copy server/web/dist/wasm
  echo "$rustc" >server/web/wasm-rustc
  echo "server/web/dist/wasm: $(du -cb server/web/dist/wasm/* server/web/dist/wasm/snippets/*/* | tail -1 | cut -f1) bytes"
  exit 0
fi

fresh=$(mktemp -d)
trap 'rm -rf "$fresh"' EXIT
copy "$fresh/wasm"
exclude=()
if [ "$rustc" != "$(cat server/web/wasm-rustc)" ]; then
  echo "notice: server/web/dist/wasm was built with $(cat server/web/wasm-rustc), this is $rustc: the module is not compared" >&2
  exclude=(--exclude=sluicegate_wasm_bg.wasm)
fi
if ! diff -r "${exclude[@]}" server/web/dist/wasm "$fresh/wasm" >/dev/null; then
  diff -rq "${exclude[@]}" server/web/dist/wasm "$fresh/wasm" >&2 || true
  echo "server/web/dist/wasm is not the current build: run scripts/build-wasm.sh and server/web/build.sh, and commit" >&2
  exit 1
fi
echo "server/web/dist/wasm is up to date"
