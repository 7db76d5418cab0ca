#!/usr/bin/env bash
# Builds limitador-server (release) from a source checkout, for the "beside limitador" rows of
# the `load` bench. Usage: benches/build-limitador.sh SRC_DIR; prints the binary's path last.
# RocksDB (limitador's disk storage, always compiled into its server) links against the system
# library instead of compiling the bundled C++ copy: install protobuf-compiler and librocksdb-dev.
# Debian 12's RocksDB is 7.8, and the `rocksdb` crate calls one function of 8.x's C API
# (`rocksdb_write_buffer_manager_destroy`, reached only by the disk storage): a linker script
# named librocksdb.so adds a no-op for it. limitador's release profile is fat LTO, one codegen
# unit: 35 to 50 minutes on two shared cores. cargo runs under `nice -n 10` already: another
# `nice` around this script makes it 19, behind every other build on the machine.
set -euo pipefail
src=$(cd "${1:?usage: build-limitador.sh LIMITADOR_SOURCE_DIR}" && pwd)
command -v protoc >/dev/null || { echo "protoc missing: apt-get install -y protobuf-compiler" >&2; exit 1; }
system=$(ls /usr/lib/x86_64-linux-gnu/librocksdb.so.* 2>/dev/null | head -1)
[ -n "$system" ] || { echo "no system RocksDB: apt-get install -y librocksdb-dev" >&2; exit 1; }
# The checkout's own target directory unless CARGO_TARGET_DIR names another.
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$src/target}
export CARGO_INCREMENTAL=0
compat=$CARGO_TARGET_DIR/rocksdb-compat
mkdir -p "$compat"
echo 'void rocksdb_write_buffer_manager_destroy(void *manager) { (void)manager; }' > "$compat/stub.c"
cc -fPIC -O2 -c "$compat/stub.c" -o "$compat/stub.o"
echo "INPUT($system $compat/stub.o)" > "$compat/librocksdb.so"
export ROCKSDB_LIB_DIR=$compat
unset ROCKSDB_STATIC
cd "$src"
nice -n 10 cargo build --release --locked -p limitador-server >&2
echo "$CARGO_TARGET_DIR/release/limitador-server"
