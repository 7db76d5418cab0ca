# Sourced by the wasm scripts: installs what building sluicegate-wasm needs, only what is
# missing: the wasm32 target, the wasm-bindgen CLI of the version Cargo.lock pins, and
# from npm, pinned in wasm/package-lock.json, binaryen's wasm-opt (Debian's is too old
# for wasm-bindgen's reference types), TypeScript and esbuild (the package's tests).
# `install_browser` adds Chromium and ChromeDriver.

apt_install() {
  local sudo=""
  if [ "$(id -u)" != 0 ]; then sudo=sudo; fi
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq "$@" >/dev/null
}

install_wasm_tools() {
  rustup target add wasm32-unknown-unknown >/dev/null 2>&1
  local version
  version=$(grep -A1 '^name = "wasm-bindgen"$' Cargo.lock | sed -n 's/^version = "\(.*\)"$/\1/p')
  if [ "$(wasm-bindgen --version 2>/dev/null)" != "wasm-bindgen $version" ]; then
    # About five minutes to build.
    cargo install wasm-bindgen-cli --version "$version"
  fi
  npm ci --prefix wasm --no-audit --no-fund --loglevel=error
}

install_browser() {
  if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
    apt_install chromium chromium-driver
  fi
}
