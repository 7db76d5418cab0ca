#!/usr/bin/env bash
# Runs every test of the workspace. Installs what the tests need on a fresh machine
# first (only what is missing), so this one command works anywhere with rustup.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! cargo nextest --version >/dev/null 2>&1; then
  cargo install cargo-nextest --locked
fi

# Doc tests (including the README's examples), which nextest does not run.
cargo test --workspace --all-features --doc
# Unit, integration and property tests (proptest regressions are committed next to them).
cargo nextest run --workspace --all-features --no-fail-fast
