#!/usr/bin/env bash
# Runs every test of the project (what CI runs, via .ci/run):
# formatting, lints, the C tests, the Java tests, the Rust test suite and the
# golden vectors (Rust, C and Java all read testdata/signal/); then lists
# every test that was skipped (with what it needs), the fuzz targets and the
# tests that ran twice (elfen_cmd::rerun, with their first failures), and
# fails when a skipped test needed something this machine offers.
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

# Every test that cannot run here records what it needs in this log (Rust:
# elfen_cmd::skip; C: t_skip / $(SKIP)), and every test that ran twice its
# first failure (elfen_cmd::rerun); the last step lists them with the Java
# tests' skips and fails if a skip needed something this machine offers.
export ELFEN_TEST_LOG="$PWD/target/test-log.tsv"
mkdir -p target && : > "$ELFEN_TEST_LOG"

if [ -f bindings/c/Makefile ]; then
  step "C ABI tests (bindings/c)"
  make -C bindings/c test
fi

step "Java bindings: signal page, Lucene server (bindings/java)"
# A subshell keeps the JDK >= 22 that java-env.sh puts first off later steps.
rm -rf bindings/java/*/target/surefire-reports
( . scripts/java-env.sh && mvn -B -ntp -f bindings/java/pom.xml verify )

step "cargo test (workspace; the harness against Lucene uses the jar the Java step built)"
cargo test --locked --workspace --no-fail-fast

step "skipped, fuzzed, ran twice"
cargo run --locked -q -p elfen-cmd --bin elfen-test-log -- "$ELFEN_TEST_LOG" \
  --surefire bindings/java/signal/target/surefire-reports \
  --surefire bindings/java/lucene/target/surefire-reports

step "VM test bed: the daemon's live tests and an end-to-end run on systemd + cgroup v2, SMT 2x2 (docs/vmtest.md)"
# the debug elfen and test binaries the workspace tests built (build once, test many)
scripts/vmtest.sh --profile debug

step "VM test bed, sched_ext guest: elfen's sched_ext scheduler on Debian 13's backports kernel 7.3 (docs/vmtest.md, docs/scx.md)"
# its own output directory beside the first run's; the daemon's tests and the
# scenarios ran in the step above, this guest runs what needs its kernel: the
# scheduler's tests and the daemon's mode scx
ELFEN_VM_OUT="${ELFEN_VM_OUT:-$PWD/target/vmtest}-trixie" \
  scripts/vmtest.sh --profile debug --guest trixie --select '^elfen-scx/|^elfen-daemon/it scx_live::'

step "all tests passed"
