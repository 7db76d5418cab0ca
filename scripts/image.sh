#!/usr/bin/env bash
# Builds the container image of `sluicegate serve` (deploy/Containerfile): a statically
# linked sluicegate (musl, with mimalloc as its allocator) and the CA certificates, and
# nothing else, with podman or docker, whichever is installed (`ENGINE=docker` chooses).
#
#   scripts/image.sh [NAME]      # tags NAME:VERSION and NAME:latest (NAME: sluicegate)
#
# Needs rustup's x86_64-unknown-linux-musl target, musl-gcc (Debian's musl-tools, for the
# C inside: SQLite, ring, mimalloc) and /etc/ssl/certs/ca-certificates.crt (Debian's
# ca-certificates). Prints the binary's and the image's size.
set -euo pipefail
cd "$(dirname "$0")/.."
name=${1:-sluicegate}
target=x86_64-unknown-linux-musl
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
source scripts/container-engine.sh

# Symbols stripped: they are most of the binary, and a panic's backtrace still names
# the functions.
CARGO_PROFILE_RELEASE_STRIP=symbols \
  cargo build --release --locked -p sluicegate --features mimalloc --target "$target"
target_dir=${CARGO_TARGET_DIR:-target}
binary="$target_dir/$target/release/sluicegate"

# The build context: exactly what the image holds.
context=$(mktemp -d)
trap 'rm -rf "$context"' EXIT
cp "$binary" "$context/sluicegate"
cp -L /etc/ssl/certs/ca-certificates.crt "$context/"
mkdir "$context/data"
"$engine" build --file deploy/Containerfile --tag "$name:$version" --tag "$name:latest" "$context"

echo "binary: $(stat -c %s "$binary") bytes ($binary)"
echo "image $name:$version: $("$engine" image inspect --format '{{.Size}}' "$name:$version") bytes ($engine)"
