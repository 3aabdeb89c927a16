#!/usr/bin/env bash
# The Java check's cost (dev.elfen.bench.CheckBench): ns per BatchThread.check()
# on an idle request lane, medians over repetitions, raw figures saved as JSON.
#
#   bindings/java/signal/bench.sh [--n N] [--reps R] [--warmup-ms MS] [--json PATH] [--no-pin]
#
# Default JSON: bindings/java/signal/target/check-bench.json. Builds the module
# (no tests) with the JDK scripts/java-env.sh finds.
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
. "$root/scripts/java-env.sh"
mvn -B -q -f "$root/bindings/java/pom.xml" -pl signal -DskipTests test-compile
cd "$root"
exec java --enable-native-access=ALL-UNNAMED \
  -cp "bindings/java/signal/target/classes:bindings/java/signal/target/test-classes" \
  dev.elfen.bench.CheckBench "$@"
