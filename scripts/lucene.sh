#!/usr/bin/env bash
# Builds what the Lucene LC service (`elfen bench --lc lucene`) and the Java
# batch job (`--programs lucene-index`) need, once: the corpus
# (scripts/corpus.sh), the Maven build of bindings/java (jar + libraries),
# and the index the harness serves: the corpus copied 40 times, ~10 M
# documents, ~800 MB, about 100 s to build the first time. Idempotent: a
# second run verifies what is there and builds nothing. Progress on stderr.
#
#   scripts/lucene.sh              corpus + build + index (40 copies)
#   scripts/lucene.sh --copies K   an index of K copies (also ELFEN_LUCENE_COPIES;
#                                  the harness reads the same variable)
#   scripts/lucene.sh --measure    then the figures of docs/lucene.md, into
#                                  results/lucene/<time>/ (~15 minutes):
#                                  demand alone (elfen-lucene demand), LC alone
#                                  vs load (configs/bench/lucene-knee.toml), the
#                                  co-location sweep (configs/bench/lucene.toml)
#
# ELFEN_CORPUS_DIR / ELFEN_INDEX_DIR move the corpus and the index, as for
# the harness and elfen-lucene; ELFEN_BIN is the elfen binary for --measure
# (default target/release/elfen).
set -euo pipefail
cd "$(dirname "$0")/.."
copies="${ELFEN_LUCENE_COPIES:-40}"
measure=0
while [ $# -gt 0 ]; do
  case "$1" in
    --copies) copies="${2:?--copies needs a number}"; shift 2 ;;
    --measure) measure=1; shift ;;
    *) echo "usage: scripts/lucene.sh [--copies K] [--measure]" >&2; exit 2 ;;
  esac
done
case "$copies" in
  '' | *[!0-9]* | 0) echo "lucene: --copies must be a number >= 1, got '$copies'" >&2; exit 2 ;;
esac
say() { printf 'lucene: %s\n' "$*" >&2; }

say "1/3 corpus (scripts/corpus.sh)"
scripts/corpus.sh >/dev/null
say "2/3 Java build (bindings/java; tests skipped here, scripts/test.sh runs them)"
jar=bindings/java/lucene/target/elfen-lucene.jar
# shellcheck source=/dev/null
. scripts/java-env.sh
if [ -f "$jar" ] && [ -z "$(find bindings/java -name '*.java' -newer "$jar" -print -quit)" ] \
    && [ -z "$(find bindings/java -name pom.xml -newer "$jar" -print -quit)" ]; then
  say "    $jar is newer than every source: not rebuilt"
else
  mvn -B -q -ntp -f bindings/java/pom.xml -pl lucene -am package -DskipTests
fi
say "3/3 index of $copies copies (built once, verified on later runs)"
bindings/java/lucene/bin/elfen-lucene index --copies "$copies"
say "ready: target/release/elfen bench --lc lucene [--programs lucene-index]"
if [ "$copies" != 40 ]; then
  say "       (this index: ELFEN_LUCENE_COPIES=$copies target/release/elfen bench --lc lucene)"
fi
[ "$measure" = 1 ] || exit 0

# --measure: the figures of docs/lucene.md. The configs serve 40 copies.
[ "$copies" = 40 ] || { say "--measure uses configs/bench/lucene*.toml, which serve --copies 40"; exit 2; }
elfen="${ELFEN_BIN:-target/release/elfen}"
[ -x "$elfen" ] || { say "$elfen is not built (cargo build --release -p elfen, or set ELFEN_BIN)"; exit 1; }
out="results/lucene/$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$out"
load() { say "load average: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) CPUs) — $1"; }
load "before the demand alone"
say "demand alone: every query 20 times back to back on cpu 0, 3 rounds -> $out/demand.json"
ELFEN_SIDE_CPUS=1 bindings/java/lucene/bin/elfen-lucene demand --cpu 0 --copies "$copies" \
  --json "$out/demand.json" 2>"$out/demand.log" | tee "$out/demand.txt"
load "before LC alone vs load"
"$elfen" bench --config configs/bench/lucene-knee.toml --json "$out/knee.json" | tee "$out/knee.txt"
load "before the co-location sweep"
"$elfen" bench --config configs/bench/lucene.toml --json "$out/bench.json" | tee "$out/bench.txt"
load "after"
say "results in $out (JSON, terminal output, reports: *-report/report.md)"
