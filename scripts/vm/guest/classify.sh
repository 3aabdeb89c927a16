#!/bin/bash
# The VM test bed's verdict on one test or scenario that has run in the
# guest (scripts/vm/guest/run.sh calls it after each one; a host-side test,
# crates/cmd/tests/vm_classify.rs, feeds it real logs):
#
#   classify.sh test|scenario NAME EXIT_STATUS OUTPUT TEST_LOG
#
# NAME is the test's (libtest's full name) or the scenario's; OUTPUT what it
# printed; TEST_LOG the file it recorded in (ELFEN_TEST_LOG,
# elfen_cmd::skip's format: "skip", "rerun" lines). Prints
# one line: STATUS <TAB> NOTE, STATUS one of
#
#   pass           it ran and passed
#   fail           it failed, timed out, or no test ran
#   skip           it recorded a skip of something this guest lacks
#   skip-runnable  it skipped, but this guest offers what it needs (judged
#                  by elfen-test-log, as scripts/test.sh judges the host's
#                  skips), or its need is unknown, or its skip was printed
#                  and not recorded (so it cannot be judged)
#
# The recorded skip decides, wherever its printed line landed: libtest
# prints "test NAME ... " before a test runs, so with --nocapture a skip's
# "skipped NAME: …" follows on that same line. A printed skip without a
# record is still a skip, never a pass: a line "skipped NAME: …" (NAME the
# test's full name or its last part; a scenario's "skipped: …" too) at the
# line's start or after libtest's "test NAME ... ". Other words that start
# with "skipped" (a cgroup restore report's "skipped GROUP: …") are not.
#
# Environment: ELFEN_TEST_LOG_BIN (the elfen-test-log binary; without it a
# recorded skip cannot be judged and counts as runnable), TEST_TIMEOUT_S
# (the bound the caller used, for the note).
set -u
kind="$1" name="$2" rc="$3" out="$4" tlog="$5"

say() { printf '%s\t%s\n' "$1" "$(printf '%s' "$2" | tr '\t\n' '  ' | cut -c1-600)"; }

# "ran twice" entries (elfen_cmd::rerun): their first failures, for the note
reruns=""
if [ -s "$tlog" ]; then
  reruns=$(awk -F'\t' '$1 == "rerun" { printf "%sran twice, the first run failed: %s", (n++ ? "; " : ""), $4 }' "$tlog")
fi
with_reruns() { printf '%s%s' "$1" "${reruns:+${1:+; }$reruns}"; }

# the "note: " lines of a scenario, the timing lines of a test
notes() {
  if [ "$kind" = scenario ]; then
    grep -E '^note: ' "$out" | sed 's/^note: //' | paste -sd';' -
  else
    grep -E -m3 '^(test [^ ]+ \.\.\. )?timing: ' "$out" | sed -E 's/^test [^ ]+ \.\.\. //' | paste -sd';' -
  fi
}

# a recorded skip: STATUS skip or skip-runnable, as elfen-test-log judges it
judged_skip() {
  local n first verdict rc_judge
  n=$(grep -c $'^skip\t' "$tlog")
  first=$(awk -F'\t' '$1 == "skip" { print "needs " $4 ": " $5; exit }' "$tlog")
  [ "$n" -le 1 ] || first="$first (and $((n - 1)) more skip(s))"
  if [ -z "${ELFEN_TEST_LOG_BIN:-}" ] || [ ! -x "${ELFEN_TEST_LOG_BIN}" ]; then
    say skip-runnable "$(with_reruns "not judged (no elfen-test-log in the guest): $first")"
    return
  fi
  verdict=$("$ELFEN_TEST_LOG_BIN" "$tlog" 2>&1)
  rc_judge=$?
  case $rc_judge in
    0) say skip "$(with_reruns "$first")" ;;
    1) say skip-runnable "$(with_reruns "this guest offers what it needs (or the need is unknown): $first")" ;;
    *) say skip-runnable "$(with_reruns "not judged (elfen-test-log: $(printf '%s' "$verdict" | tail -n1)): $first")" ;;
  esac
}

# a skip that was printed only: its reason
printed_skip() {
  awk -v full="$name" -v kind="$kind" '
    BEGIN { n = split(full, p, "::"); last = p[n] }
    {
      l = $0
      if (l ~ /^test [^ ]+ \.\.\. /) sub(/^test [^ ]+ \.\.\. /, "", l)
      for (i = 0; i < 3; i++) {
        w = (i == 0) ? full : (i == 1) ? last : ""
        if (i == 2 && kind != "scenario") break
        pre = (w == "") ? "skipped: " : "skipped " w ": "
        if (substr(l, 1, length(pre)) == pre) { print substr(l, length(pre) + 1); exit }
      }
    }' "$out"
}

if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
  say fail "$(with_reruns "timed out after ${TEST_TIMEOUT_S:-?} s")"
  exit 0
fi
if [ "$kind" = scenario ]; then
  case $rc in
    0) say pass "$(with_reruns "$(notes)")" ;;
    77)
      if [ -s "$tlog" ] && grep -q $'^skip\t' "$tlog"; then
        judged_skip
      else
        say skip-runnable "$(with_reruns "printed, not recorded (so not judged): $(printed_skip)")"
      fi
      ;;
    *)
      n=$(notes)
      say fail "$(with_reruns "$(grep -E '^FAIL: ' "$out" | head -n3 | paste -sd';' -)${n:+; $n}")"
      ;;
  esac
  exit 0
fi

if [ "$rc" -ne 0 ]; then
  note=$(grep -A4 -m1 'panicked at' "$out" | head -n5 | cut -c1-300 | paste -sd' ' -)
  say fail "$(with_reruns "${note:-exit status $rc}")"
elif [ -s "$tlog" ] && grep -q $'^skip\t' "$tlog"; then
  judged_skip
elif grep -q -E '^test .* \.\.\. ignored' "$out"; then
  say skip-runnable "$(with_reruns "ignored (#[ignore] states no need)")"
elif [ -n "$(printed_skip)" ]; then
  say skip-runnable "$(with_reruns "printed, not recorded (so not judged): $(printed_skip)")"
elif ! grep -q -E '^test result: ok\. 1 passed' "$out"; then
  say fail "$(with_reruns "no test ran (libtest did not report one passed)")"
else
  say pass "$(with_reruns "$(notes)")"
fi
