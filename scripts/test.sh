#!/usr/bin/env bash
# Runs every test of the workspace. Installs what the tests need on a fresh machine
# first (only what is missing, with apt-get: as root or through sudo), so this one
# command works on Debian or Ubuntu with rustup.
set -euo pipefail
cd "$(dirname "$0")/.."

# apt_install, install_wasm_tools, install_browser.
source scripts/wasm-tools.sh

# The Redis tests start their own redis-server (and a 3-node cluster) on loopback ports.
if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
  apt_install redis-server
fi
# The TLS tests (tollgate-redis's and the CLI's) make their certificates with openssl.
if ! command -v openssl >/dev/null 2>&1; then
  apt_install openssl
fi
# Node.js runs the wasm packages' tests; npm installs their tools (wasm-opt, tsc).
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  apt_install nodejs npm
fi
# The CLI's progress test gives the command a terminal with `script`.
if ! command -v script >/dev/null 2>&1; then
  apt_install bsdutils
fi
# The package starts a system service; the tests do not use it.
if command -v systemctl >/dev/null 2>&1; then systemctl stop redis-server >/dev/null 2>&1 || true; fi

if ! cargo nextest --version >/dev/null 2>&1; then
  cargo install cargo-nextest --locked
fi

# The wasm build tools (target, wasm-bindgen CLI, wasm-opt) and the browser for its e2e.
install_wasm_tools
install_browser

# Doc tests (including the README's examples), which nextest does not run.
cargo test --workspace --all-features --doc
# Unit, integration and property tests (proptest regressions are committed next to them).
cargo nextest run --workspace --all-features --no-fail-fast

# tollgate-wasm in a real JS engine: the bindings under Node.js (wasm-bindgen-test), then
# the built packages (size budget checked) as users import them, and the demo page in
# headless Chromium.
CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUNNER=wasm-bindgen-test-runner \
  cargo test -p tollgate-wasm --target wasm32-unknown-unknown --test node
bash scripts/build-wasm.sh
node --test wasm/tests/limiter.test.mjs
node wasm/examples/throttle.mjs   # the README's example runs as shown
wasm/node_modules/.bin/tsc --noEmit --strict --target es2022 --module es2022 \
  --moduleResolution bundler --lib esnext,dom wasm/tests/types.ts
node wasm/e2e/e2e.mjs
