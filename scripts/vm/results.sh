#!/usr/bin/env bash
# Prints the VM test bed's results and decides the run's exit status.
#
#   scripts/vm/results.sh OUT_DIR BOOT_STATUS ACCEL BOOT_S VM_S TOTAL_S
#
# OUT_DIR/results is what the guest wrote (summary.tsv, logs/, reruns.tsv,
# facts.txt, complete). Exit 1 on a boot or run timeout, missing or
# incomplete results, a failed test, a skip of something the guest offers
# (skip-runnable: judged in the guest by elfen-test-log), or a skip
# scripts/vm/expected-skips does not list. Tests that ran twice (their own
# elfen_cmd::rerun, or resumed after a silence of the guest) are counted
# and listed.
set -uo pipefail
. "$(dirname "$0")/lib.sh"

out="$1" boot_status="$2" accel="$3" boot_s="$4" vm_s="$5" total_s="$6"
res="$out/results"
sum="$res/summary.tsv"
bad=0

case "$boot_status" in
  0) ;;
  2) say "FAILED: boot timeout (serial console: $out/serial.log)"; exit 1 ;;
  3) say "FAILED: run timeout (serial console: $out/serial.log)"; bad=1 ;;
  4) say "FAILED: qemu did not run (see $out/qemu.err)"; exit 1 ;;
  5) say "FAILED: the guest went silent and the restarts ran out (see $out/silences.txt)"; bad=1 ;;
  *) say "FAILED: boot.sh exit status $boot_status"; exit 1 ;;
esac
if [ ! -s "$sum" ]; then
  say "FAILED: no results from the guest (serial console: $out/serial.log)"
  exit 1
fi
if [ ! -e "$res/complete" ]; then
  say "FAILED: the results are incomplete: the guest stopped before its last test (serial console: $out/serial.log)"
  bad=1
fi

# A skip is expected only where scripts/vm/expected-skips names the test:
# "suite<whitespace>test-regex<whitespace>why".
expected_skip() {
  local suite="$1" test="$2" s r _
  while read -r s r _; do
    case "$s" in '' | '#'*) continue ;; esac
    [ "$s" = "$suite" ] && [[ "$test" =~ ^($r)$ ]] && return 0
  done <"$VM_DIR/expected-skips"
  return 1
}

printf '\n%-6s %-7s %-28s %-66s %s\n' status seconds suite test note
pass=0 fail=0 skip=0 runnable=0
skips=""
while IFS=$'\t' read -r suite test status secs note; do
  mark="$status"
  case "$status" in
    pass) pass=$((pass + 1)) ;;
    skip)
      skip=$((skip + 1))
      if ! expected_skip "$suite" "$test"; then
        mark="SKIP!"
        note="unexpected skip (not in scripts/vm/expected-skips): $note"
        bad=1
      fi
      skips+="  $mark $suite $test: $note"$'\n'
      ;;
    skip-runnable)
      skip=$((skip + 1)) runnable=$((runnable + 1))
      mark="SKIP!"
      note="skipped, but it could have run here (or cannot be judged): $note"
      bad=1
      skips+="  $mark $suite $test: $note"$'\n'
      ;;
    *) fail=$((fail + 1)); mark="FAIL"; bad=1 ;;
  esac
  printf '%-6s %7s %-28s %-66s %s\n' "$mark" "$secs" "$suite" "$test" "$note"
done <"$sum"

# the logs of what failed, shortened
while IFS=$'\t' read -r suite test status _ _; do
  [ "$status" = fail ] || continue
  log="$res/logs/${suite//\//.}.${test//::/.}.log"
  [ "$suite" = scenario ] && log="$res/logs/scenario.$test.log"
  [ "$suite" = vm ] && continue
  printf '\n--- %s %s (last 40 lines of %s)\n' "$suite" "$test" "$log"
  tail -n 40 "$log" 2>/dev/null
done <"$sum"

up=$(sed -n 's/^uptime_at_start_s //p' "$res/facts.txt" 2>/dev/null)
printf '\nVM test bed: %s passed, %s failed, %s skipped; accelerator %s; ' "$pass" "$fail" "$skip" "${accel^^}"
printf 'boot %s s (qemu start to the runner; the guest kernel had run %s s); ' "$boot_s" "${up:-?}"
printf 'guest %s s; whole run %s s\n' "$vm_s" "$total_s"
printf 'skipped: %s (%s of them could have run in the guest)\n' "$skip" "$runnable"
printf '%s' "$skips"
reruns=0
[ -s "$res/reruns.tsv" ] && reruns=$(wc -l <"$res/reruns.tsv")
echo "ran twice: $reruns"
[ "$reruns" -eq 0 ] || awk -F'\t' '{ printf "  %s %s: %s\n", $1, $2, $3 }' "$res/reruns.tsv"
if [ -s "$out/silences.txt" ]; then
  echo "the guest went silent $(wc -l <"$out/silences.txt") time(s) (the test in flight failed if it runs elfen's real-time threads or BPF source, else it ran again, counted above; the vCPUs' registers and any SysRq backtraces are kept):"
  sed 's/^/  /' "$out/silences.txt"
fi
echo "SMT topology emulated (2 cores x 2 threads): it proves topology, pairing and multi-pair code paths, not SMT interference."
echo "logs: $out (serial.log, results/logs/)"
if [ "$bad" -ne 0 ]; then
  say "FAILED"
  exit 1
fi
say "all passed"
