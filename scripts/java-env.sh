#!/usr/bin/env bash
# Finds a JDK new enough for the Java bindings (bindings/java: the foreign
# memory API is final in Java 22) and puts it first.
#
#   . scripts/java-env.sh     # sourced: exports JAVA_HOME and PATH, returns 1 if none
#   scripts/java-env.sh       # executed: prints the JDK's home on stdout, exits 1 if none
#
# Looks, in order, at $JAVA_HOME, every /usr/lib/jvm/* (the newest suitable one
# wins), then the `java` on PATH. A candidate must be a JDK (bin/java and
# bin/javac) of feature version >= ELFEN_JAVA_MIN (default 22). Says which one
# it took on stderr, and when there is none, names everything it looked at and
# why each was refused.

_elfen_java_env() {
  local min="${ELFEN_JAVA_MIN:-22}"
  local looked=() home ver best="" best_ver=0

  # The feature version of the JDK at $1 (0 when unknown): its `release` file,
  # else what `java -version` says.
  _elfen_jdk_version() {
    local v=""
    if [ -r "$1/release" ]; then
      v=$(sed -n 's/^JAVA_VERSION="\([^"]*\)".*/\1/p' "$1/release" 2>/dev/null | head -n1)
    fi
    if [ -z "$v" ] && [ -x "$1/bin/java" ]; then
      v=$("$1/bin/java" -version 2>&1 | sed -n 's/.*version "\([^"]*\)".*/\1/p' | head -n1)
    fi
    v="${v#1.}"          # 1.8.0 -> 8.0
    v="${v%%[.+-]*}"     # 25.0.3 -> 25, 22-ea -> 22
    case "$v" in '' | *[!0-9]*) echo 0 ;; *) echo "$v" ;; esac
  }

  # Records why $1 is refused, or returns 0 when it is a suitable JDK.
  _elfen_jdk_ok() {
    local h="$1" what="$2" v
    if [ ! -x "$h/bin/java" ]; then
      looked+=("$what $h: no bin/java")
      return 1
    fi
    if [ ! -x "$h/bin/javac" ]; then
      looked+=("$what $h: a JRE, no bin/javac")
      return 1
    fi
    v=$(_elfen_jdk_version "$h")
    if [ "$v" -lt "$min" ]; then
      looked+=("$what $h: Java $v, older than $min")
      return 1
    fi
    ver="$v"
    return 0
  }

  if [ -n "${JAVA_HOME:-}" ] && _elfen_jdk_ok "$JAVA_HOME" "JAVA_HOME"; then
    best="$JAVA_HOME"
    best_ver="$ver"
  fi
  if [ -z "$best" ]; then
    for home in /usr/lib/jvm/*; do
      [ -d "$home" ] && [ ! -L "$home" ] || continue
      if _elfen_jdk_ok "$home" "candidate" && [ "$ver" -gt "$best_ver" ]; then
        best="$home"
        best_ver="$ver"
      fi
    done
    [ -e /usr/lib/jvm ] || looked+=("/usr/lib/jvm (does not exist)")
  fi
  if [ -z "$best" ]; then
    local j
    j=$(command -v java 2>/dev/null || true)
    if [ -n "$j" ]; then
      home=$(dirname "$(dirname "$(readlink -f "$j")")")
      if _elfen_jdk_ok "$home" "java on PATH ($j):"; then
        best="$home"
        best_ver="$ver"
      fi
    else
      looked+=("PATH: no java")
    fi
  fi

  if [ -z "$best" ]; then
    {
      echo "java-env: no JDK >= $min found (the Java bindings need the final foreign memory API of Java 22)."
      echo "java-env: looked at:"
      printf '  - %s\n' "${looked[@]}"
      echo "java-env: install a JDK >= $min (e.g. Temurin 25) under /usr/lib/jvm, or set JAVA_HOME to one."
    } >&2
    return 1
  fi
  echo "java-env: using JDK $best_ver at $best" >&2
  ELFEN_JDK_HOME="$best"
  return 0
}

if [ "${BASH_SOURCE[0]}" != "$0" ]; then
  # sourced
  if _elfen_java_env; then
    export JAVA_HOME="$ELFEN_JDK_HOME"
    case ":$PATH:" in
      "$JAVA_HOME/bin:"*) ;;
      *) export PATH="$JAVA_HOME/bin:$PATH" ;;
    esac
    unset ELFEN_JDK_HOME
    unset -f _elfen_java_env _elfen_jdk_version _elfen_jdk_ok
  else
    unset -f _elfen_java_env _elfen_jdk_version _elfen_jdk_ok
    return 1
  fi
else
  set -euo pipefail
  _elfen_java_env || exit 1
  echo "$ELFEN_JDK_HOME"
fi
