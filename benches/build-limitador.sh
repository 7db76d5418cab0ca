#!/usr/bin/env bash
# Builds limitador-server (release) from a source checkout, for the "beside limitador" rows of
# the `load` bench. Usage: benches/build-limitador.sh SRC_DIR; prints the binary's path last.
# RocksDB (limitador's disk storage, always compiled into its server) links against the system
# library instead of compiling the bundled C++ copy: install protobuf-compiler and librocksdb-dev.
set -euo pipefail
src=${1:?usage: build-limitador.sh LIMITADOR_SOURCE_DIR}
command -v protoc >/dev/null || { echo "protoc missing: apt-get install -y protobuf-compiler" >&2; exit 1; }
libdir=${ROCKSDB_LIB_DIR:-/usr/lib/x86_64-linux-gnu}
[ -e "$libdir/librocksdb.so" ] || { echo "librocksdb.so missing in $libdir: apt-get install -y librocksdb-dev" >&2; exit 1; }
export ROCKSDB_LIB_DIR=$libdir
unset ROCKSDB_STATIC
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/work/targets/limitador}
export CARGO_INCREMENTAL=0
cd "$src"
nice -n 10 cargo build --release --locked -p limitador-server >&2
echo "$CARGO_TARGET_DIR/release/limitador-server"
