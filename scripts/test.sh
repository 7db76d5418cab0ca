#!/usr/bin/env bash
# Runs every test of the workspace. Installs what the tests need on a fresh machine
# first (`scripts/install.sh`: only what is missing), so this one command works on
# Debian or Ubuntu with rustup.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each stage's start, in seconds into the run: the stage table of docs/tests.md.
stage() { echo "== test.sh: $1 (at ${SECONDS}s)"; }

stage "install"
bash scripts/install.sh

# Every build below selects the whole workspace with all its features, as nextest does:
# cargo unifies features over the packages selected, so a build of one package alone
# would compile much of the tree again with other features.
#
# The libraries, the Redis module among them, loaded by its tests' redis-server: cargo
# does not rebuild a cdylib for integration tests, so build it here, with the tests'
# profile, and tell the tests where it is.
stage "the libraries and the Redis module"
cargo build --profile test --workspace --all-features --lib
target_dir=${CARGO_TARGET_DIR:-target}
case $target_dir in /*) ;; *) target_dir="$(pwd)/$target_dir" ;; esac
export SLUICEGATE_REDIS_MODULE="$target_dir/debug/libsluicegate_redis_module.so"

# Doc tests (including the README's examples), which nextest does not run.
stage "doc tests"
cargo test --workspace --all-features --doc
# The guide as a book (its Rust snippets are among the doc tests above, through
# sluicegate-tests), and every relative link and anchor of the docs resolving.
stage "the guide"
mdbook build docs
python3 scripts/check-links.py
# Unit, integration and property tests (proptest regressions are committed where proptest
# keeps them: in a proptest-regressions/ folder beside the folder of a crate's lib.rs or a
# test binary's main.rs, a file per module, e.g. core/tests/proptest-regressions/ban.txt).
stage "nextest"
cargo nextest run --workspace --all-features --no-run
# The image's static binary (a release build for musl) compiles while the tests run, in a
# target directory of its own so that neither waits on the other's lock: the tests
# mostly wait on sockets and timers, and none of them may depend on a quiet machine.
image_log="$target_dir/image-build.log"
CARGO_TARGET_DIR="$target_dir/image" setsid bash scripts/image.sh >"$image_log" 2>&1 &
image_build=$!
# A run that stops early stops the build too (its own process group: cargo and rustc).
trap 'kill -- "-$image_build" 2>/dev/null || true' EXIT
cargo nextest run --workspace --all-features --no-fail-fast
# The guide's token-budget example runs as shown (an axum endpoint calling itself).
stage "the token-budget example"
cargo build -q --profile test --workspace --all-features --example token_budget
"$target_dir/debug/examples/token_budget" --once >/dev/null

# sluicegate-wasm: the client module's Rust natively (nextest above ran the full one's),
# then the package built (both modules' size budgets checked) and used as users do: the
# limiter and the throttle under Node.js, the packed tarball installed and bundled, the
# types, and the demo page in headless Chromium.
stage "wasm"
cargo nextest run -p sluicegate-wasm
bash scripts/build-wasm.sh
node --test wasm/tests/limiter.test.mjs wasm/tests/throttle.test.mjs wasm/tests/pack.test.mjs
node wasm/examples/throttle.mjs   # the README's example runs as shown
wasm/node_modules/.bin/tsc --noEmit --strict --target es2022 --module es2022 \
  --moduleResolution bundler --lib esnext,dom wasm/tests/types.ts
node wasm/e2e/e2e.mjs

# The management page (server/web): its committed copy of the wasm package is the current
# build, its preview decides as `sluicegate simulate` does, and the page in headless
# Chromium against a real `sluicegate serve` (screenshots in target/page-e2e/).
stage "the page"
bash server/web/build.sh --check
cargo build --profile test --workspace --all-features --bin sluicegate
node --test server/web/tests/preview.test.mjs
node server/web/e2e/e2e.mjs

# Deploying: the Kubernetes manifests rendered and valid (their flags are checked by the
# CLI's tests), then the container image built from a static binary and run read-only
# under podman: healthy, ready, deciding over HTTP and Envoy's call, stopped cleanly.
stage "manifests"
bash scripts/kube-test.sh
stage "the image"
wait "$image_build" || { cat "$image_log" >&2; echo "test.sh: the image did not build" >&2; exit 1; }
SKIP_BUILD=1 bash scripts/image-test.sh
stage "done"
