# shellcheck shell=bash
# Sourced by the VM test bed's scenarios (scripts/vm/scenarios/*.sh), which
# run in the guest as root, one after the other, each in its own bash. A
# scenario prints what it does; "FAIL: …" lines are its failed checks, "note:
# …" lines its figures (they become the result's note); it ends with `finish`
# (exit 0 if no check failed, else 1) or `skip NEED REASON` (exit 77).
#
# The environment has ELFEN_BIN (the host-built elfen), ELFEN_REPO (the
# repository's path, linked to the payload's copy of configs/ and packaging/),
# ELFEN_VM (tcg or kvm), ELFEN_VM_SLACK (how many times longer than on the
# host things may take), ELFEN_SCENARIO (its name) and ELFEN_TEST_LOG (its
# test log, where a skip is recorded and judged).

FAILS=0
SLACK=${ELFEN_VM_SLACK:-10}

# check WHAT CMD...: runs CMD; a failure is counted and printed.
check() {
  local what="$1"
  shift
  if "$@"; then
    echo "ok: $what"
  else
    echo "FAIL: $what"
    FAILS=$((FAILS + 1))
  fi
}

note() { echo "note: $*"; }
# skip NEED REASON: the scenario cannot run here; NEED is what it needs, as
# elfen_cmd::skip's tokens name it (cgroup-v2:cpu, systemd, program:NAME, …):
# printed, recorded in the test log (skip, suite, test, need, reason), judged
# by the runner as the host judges a test's skip (a skip of what the guest
# offers fails the run); exit 77.
skip() {
  local need="$1"
  shift
  echo "skipped ${ELFEN_SCENARIO:-scenario}: $* (needs $need)"
  if [ -n "${ELFEN_TEST_LOG:-}" ]; then
    printf 'skip\tscenario\t%s\t%s\t%s\n' "${ELFEN_SCENARIO:-scenario}" "$need" "${*//$'\t'/ }" >>"$ELFEN_TEST_LOG"
  fi
  exit 77
}
finish() {
  [ "$FAILS" -eq 0 ] || { echo "$FAILS checks failed"; exit 1; }
  exit 0
}

# eventually SECONDS EXPR: the shell expression EXPR (a string, evaluated
# again at each poll) holds within SECONDS x slack.
eventually() {
  local end=$((SECONDS + $1 * SLACK))
  until eval "$2"; do
    [ "$SECONDS" -lt "$end" ] || return 1
    sleep 0.2
  done
}

# metric PORT NAME: a sample's value from http://127.0.0.1:PORT/metrics
# (NAME with its labels, as printed: elfen_lc_busy_seconds_total{lane="0",cpu="0"}).
metric() {
  local port="$1" name="$2" v
  v=$(exec 3<>"/dev/tcp/127.0.0.1/$port" &&
    printf 'GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n' >&3 &&
    tr -d '\r' <&3 | awk -v n="$name" '$1 == n { print $2 }')
  printf '%s\n' "${v:-}"
}

# cg_usage_s GROUP: CPU time of a v2 group (below /sys/fs/cgroup), seconds.
cg_usage_s() {
  awk '$1 == "usage_usec" { printf "%.3f\n", $2 / 1e6 }' "/sys/fs/cgroup/$1/cpu.stat"
}

# cg_read GROUP FILE: a cgroup file's content, trimmed.
cg_read() { tr -d '\n' <"/sys/fs/cgroup/$1/$2" 2>/dev/null; }

# calc EXPR: floating-point arithmetic (awk), e.g. calc "$a - $b".
calc() { awk "BEGIN { printf \"%.3f\", $* }"; }

# holds EXPR: whether a floating-point comparison holds, e.g. holds "$a > 0".
holds() { awk "BEGIN { exit !($*) }"; }
