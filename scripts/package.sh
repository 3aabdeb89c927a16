#!/usr/bin/env bash
# Builds the Debian package of elfen for an operator: the `elfen` binary,
# /etc/elfen/daemon.toml (commented; a conffile), the hardened systemd unit
# elfen-daemon.service (installed, not enabled) and the operator's docs.
#
#   scripts/package.sh      → target/debian/elfen_<version>-1_<arch>.deb, then:
#   apt install ./target/debian/elfen_*.deb
#
# It installs only what building the binary needs (scripts/deps/core.apt,
# bpf.apt, package.apt: a C compiler, clang for the BPF program, libelf and
# zlib, dpkg-dev) — not the research toolchains (Java, the corpus, valgrind)
# — and cargo-deb, once, with `cargo install --locked` (kept in
# $CARGO_HOME/bin, default ~/.cargo/bin; a second run reuses it). The package's
# size and the time it takes are printed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."

CARGO_DEB_VERSION=3.8.0

say() { printf 'package: %s\n' "$*" >&2; }

scripts/setup.sh --deps core bpf package
if ! command -v cargo >/dev/null && [ -x "$HOME/.cargo/bin/cargo" ]; then
  export PATH="$HOME/.cargo/bin:$PATH"
fi
command -v cargo >/dev/null || { say "cargo not found: install Rust with rustup (https://rustup.rs)"; exit 1; }

have=$(cargo deb --version 2>/dev/null | awk '{print $NF}' || true)
if [ "$have" != "$CARGO_DEB_VERSION" ]; then
  say "installing cargo-deb $CARGO_DEB_VERSION (once; cargo install --locked)"
  cargo install --locked --quiet cargo-deb --version "$CARGO_DEB_VERSION"
else
  say "cargo-deb $have present"
fi

t0=$(date +%s)
say "building the release binary and the package (cargo deb -p elfen)"
out=$(cargo deb --locked -p elfen "$@" | tail -1)
t1=$(date +%s)
[ -f "$out" ] || { say "cargo deb did not say where the package is (got: $out)"; exit 1; }
size=$(stat -c %s "$out")
say "$out: $((size / 1024)) KiB, built in $((t1 - t0)) s"
say "install: apt install ./${out#"$PWD"/}"
echo "$out"
