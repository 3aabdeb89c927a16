#!/usr/bin/env bash
# Installs what elfen needs on a fresh Debian machine of this kind and builds it.
#
#   scripts/setup.sh            install missing Debian packages, check the Rust toolchain,
#                               build the release binary (target/release/elfen)
#   scripts/setup.sh --deps     only install missing packages
#   scripts/setup.sh --deps core bpf
#                               only the packages of those lists (scripts/deps/core.apt, …)
#
# Debian packages are listed one per line in scripts/deps/*.apt (one file per part
# of the project). Only missing ones are installed, so a second run is quick.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf 'setup: %s\n' "$*" >&2; }

install_debs() {
  local want=() missing=() lists=()
  if [ $# -gt 0 ]; then
    for l in "$@"; do lists+=("scripts/deps/$l.apt"); done
  else
    lists=(scripts/deps/*.apt)
  fi
  while IFS= read -r line; do
    line="${line%%#*}"; line="${line//[[:space:]]/}"
    [ -n "$line" ] && want+=("$line")
  done < <(cat "${lists[@]}")
  for p in "${want[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    say "Debian packages: all ${#want[@]} present"
    return
  fi
  say "installing Debian packages: ${missing[*]}"
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { say "need root (or sudo) to install: ${missing[*]}"; exit 1; }
    sudo="sudo"
  fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

check_rust() {
  if ! command -v cargo >/dev/null; then
    [ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
  fi
  command -v cargo >/dev/null || { say "cargo not found: install Rust with rustup (https://rustup.rs)"; exit 1; }
  for c in rustfmt clippy; do
    if ! cargo "$c" --version >/dev/null 2>&1 && command -v rustup >/dev/null; then
      say "adding rustup component $c"
      rustup component add "$c" >/dev/null
    fi
  done
}

check_java() {
  # The Java bindings need a JDK >= 22 (the machine provides it; Debian 12
  # packages only 17): say now if there is none, do not fail the Rust build.
  scripts/java-env.sh >/dev/null || say "no JDK >= 22: the Java bindings (bindings/java) cannot be built or tested"
}

if [ "${1:-}" = "--deps" ]; then
  shift
  install_debs "$@"
  [ $# -eq 0 ] && check_java
  exit 0
fi
install_debs
check_java
check_rust
say "building target/release/elfen"
cargo build --release --locked -p elfen
