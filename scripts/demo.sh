#!/usr/bin/env bash
# The main job on a fresh machine: install what is missing, build, and run the
# co-location demo (elfen bench: the built-in LC service against batch kernels
# under every configuration, a short load sweep) — then print the side-by-side
# table and the path of the report. Extra arguments go to `elfen bench`
# (see `target/release/elfen bench --help`).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec target/release/elfen bench "$@"
