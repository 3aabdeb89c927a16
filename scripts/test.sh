#!/usr/bin/env bash
# Runs every test of the project (what CI runs, via .ci/run):
# formatting, lints, the Rust test suite, the C tests, the Java tests and the
# golden vectors (Rust, C and Java all read testdata/signal/).
# Installs what is missing first. Build once, test many: the release binary
# and the test binaries are each built once.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
step() { printf '\n== %s (%ss)\n' "$*" "$(( $(date +%s) - start ))" >&2; }

step "setup: packages and toolchain"
scripts/setup.sh --deps
command -v cargo >/dev/null || export PATH="$HOME/.cargo/bin:$PATH"

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy -D warnings"
cargo clippy --locked --workspace --all-targets -- -D warnings

step "cargo test (workspace)"
cargo test --locked --workspace

if [ -f bindings/c/Makefile ]; then
  step "C ABI tests (bindings/c)"
  make -C bindings/c test
fi

step "Java bindings: signal page, Lucene server (bindings/java)"
# A subshell keeps the JDK >= 22 that java-env.sh puts first off later steps.
( . scripts/java-env.sh && mvn -B -ntp -f bindings/java/pom.xml verify )

step "the harness against Lucene (needs the jar the Java step built)"
cargo test --locked -p elfen-bench --test lucene

step "VM test bed: the daemon's live tests and an end-to-end run on systemd + cgroup v2, SMT 2x2 (docs/vmtest.md)"
# the debug elfen and test binaries the workspace tests built (build once, test many)
scripts/vmtest.sh --profile debug

step "all tests passed"
