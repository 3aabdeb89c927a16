#!/bin/bash
# The VM test bed's guest side, run at boot by elfen-vmtest.service from the
# payload disk the host made (/mnt/elfen). It
#
#   1. links the host's paths to the payload (the test binaries find their
#      helper binaries and the repository's files where cargo built them);
#   2. records what this guest is (cgroup file system, controllers, SMT
#      siblings) and checks the test bed's promises: cgroup v2 only, 2 cores x
#      2 threads;
#   3. runs every test of every test binary in tests.tsv, one test per
#      process (libtest --exact), and every scenario in scenarios/, each with
#      a test log of its own (ELFEN_TEST_LOG: its recorded skips and second
#      runs), and judges each with classify.sh: a recorded skip is a skip
#      wherever its printed line landed, judged here by elfen-test-log as the
#      host judges its own (a skip of what this guest offers is
#      skip-runnable, a failure of the run);
#   4. writes results/summary.tsv (suite, test, pass|fail|skip|skip-runnable,
#      seconds, note), a log and a test log per test under results/logs/,
#      results/reruns.tsv (each test that ran twice, and why), and
#      results/complete last.
#
# Progress goes to the console as "@@elfen-vm ..." lines, which the host
# prints; a test that runs long says so every minute, so a console that
# stays quiet means a guest that stopped (the host's silence bound). The
# unit powers the guest off when this script ends.
#
# Resuming: when the host restarted the guest after it went silent, the
# payload holds results without results/complete. The run then goes on
# after the last recorded test. The test that was in flight at the silence
# (results/current) fails if it runs elfen's real-time threads (RT_SUITES:
# a silence there may be elfen starving the kernel, so it is not run
# again); any other runs again, counted in reruns.tsv, and fails if the
# guest went silent during it twice. Every record is synced to the disk as
# it is written.
set -u
P=/mnt/elfen
R=$P/results
SUMMARY=$R/summary.tsv
RESUMED=""
if [ -s "$SUMMARY" ] && [ ! -e "$R/complete" ]; then
  RESUMED=$(($(cat "$R/boots" 2>/dev/null || echo 1) + 1))
  echo "$RESUMED" >"$R/boots"
else
  rm -rf "$R"
  mkdir -p "$R/logs"
  : >"$SUMMARY"
  : >"$R/reruns.tsv"
  echo 1 >"$R/boots"
fi

mark() { echo "@@elfen-vm $*"; }

# Whether "suite<TAB>test" has a result already (a resumed run).
done_before() {
  [ -n "$RESUMED" ] && cut -f1,2 "$SUMMARY" | grep -qxF "$1"$'\t'"$2"
}

# The suites whose tests run elfen's real-time threads (the daemon's guards
# and LC signal writer at SCHED_FIFO) or load its BPF signal source: a
# silence of the guest during one of them fails it rather than running it
# again, since elfen starving a CPU's kernel work is one known cause.
RT_SUITES="elfen-daemon/it elfen-bpf/sources scenario"

# rerun SUITE TEST WHY: a test that runs a second time, counted (synced).
rerun() {
  printf '%s\t%s\t%s\n' "$1" "$2" "${3//$'\t'/ }" >>"$R/reruns.tsv"
  sync "$R/reruns.tsv"
}

# begin SUITE TEST: notes the test in flight (synced); its note prefix when
# it runs again after a silence during it, in AGAIN. Returns 1 when it is
# not to run (recorded as a failure then): the guest went silent during it
# and it runs elfen's real-time threads, or went silent during it twice.
AGAIN=""
begin() {
  AGAIN=""
  if [ -n "$RESUMED" ] && [ -s "$R/current" ] && [ "$(cat "$R/current")" = "$1"$'\t'"$2" ]; then
    printf '%s\t%s\n' "$1" "$2" >>"$R/silenced.tsv"
    if [[ " $RT_SUITES " == *" $1 "* ]]; then
      : >"$R/current"
      record "$1" "$2" fail 0 "the guest went silent during this test, which runs elfen's real-time threads or BPF source: not run again (the host restarted the guest)"
      return 1
    fi
    if [ "$(grep -cxF "$1"$'\t'"$2" "$R/silenced.tsv")" -ge 2 ]; then
      : >"$R/current"
      record "$1" "$2" fail 0 "the guest went silent during this test twice (the host restarted it each time)"
      return 1
    fi
    AGAIN="run again: the guest went silent during its first run"
    rerun "$1" "$2" "the guest went silent during its first run (resumed after a restart)"
  fi
  printf '%s\t%s\n' "$1" "$2" >"$R/current"
  sync "$R/current"
}

# A line a minute while a test runs (killed by the caller).
heartbeat() {
  local what="$1" n=0
  while sleep 60; do
    n=$((n + 60))
    mark "still running: $what (${n} s)"
  done
}

# The run's settings from the host (ELFEN_BIN, timeouts, a selection), and the
# accelerator the host chose (on the kernel command line): tests read ELFEN_VM
# (tcg or kvm) and ELFEN_VM_SLACK to stretch their time lines and the bounds
# of their timing checks. ELFEN_TEST_LOG_BIN (in the env file) is the
# elfen-test-log that judges each test's skips here.
set -a
. "$P/env"
ELFEN_VM=$(sed -n 's/.*elfen\.accel=\([a-z]*\).*/\1/p' /proc/cmdline)
ELFEN_VM=${ELFEN_VM:-unknown}
# how many times longer than on the host the live tests allow (time lines,
# bounds): emulation runs code about ten times slower
case "$ELFEN_VM" in kvm) ELFEN_VM_SLACK=${ELFEN_VM_SLACK:-3} ;; *) ELFEN_VM_SLACK=${ELFEN_VM_SLACK:-10} ;; esac
set +a
TEST_TIMEOUT_S=${ELFEN_VM_TEST_TIMEOUT_S:-600}
SELECT=${ELFEN_VM_SELECT:-}

# suite test status seconds note
record() {
  local note="${5//$'\t'/ }"
  note="${note//$'\n'/ | }"
  printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$note" >>"$SUMMARY"
  sync "$SUMMARY"
  mark "[$3] $1 $2 (${4} s)${note:+ — $note}"
}

# 1. the host's paths
while IFS=$'\t' read -r abs rel; do
  [ -n "$abs" ] || continue
  mkdir -p "$(dirname "$abs")"
  ln -sfn "$P/$rel" "$abs"
done <"$P/links.tsv"

# 2. what this guest is
up=$(cut -d' ' -f1 /proc/uptime)
fs=$(stat -fc %T /sys/fs/cgroup)
mark "up: runner started ${up} s after the kernel; kernel $(uname -r); $(nproc) CPUs; /sys/fs/cgroup is ${fs}; accelerator ${ELFEN_VM}, slack ${ELFEN_VM_SLACK}${RESUMED:+; boot $RESUMED, resuming after $(wc -l <"$SUMMARY") results}"
{
  echo "uptime_at_start_s $up"
  echo "kernel $(uname -r)"
  echo "systemd $(systemctl --version | head -n1)"
  echo "system_state $(systemctl is-system-running 2>/dev/null)"
  echo "cgroup_fs $fs"
  echo "cgroup_controllers $(cat /sys/fs/cgroup/cgroup.controllers 2>/dev/null)"
  echo "cgroup_subtree_control $(cat /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null)"
  for c in /sys/devices/system/cpu/cpu[0-9]*; do
    echo "${c##*/}_siblings $(cat "$c/topology/thread_siblings_list")"
  done
  echo "btf $([ -e /sys/kernel/btf/vmlinux ] && echo yes || echo no)"
  echo "cpu_model $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"
} >"$R/facts.txt"
sed 's/^/@@elfen-vm fact: /' "$R/facts.txt"

# Under TCG, the tracepoints the guest's BPF programs attach to are
# switched on once, here, and left on (their trace buffer off): attaching the
# first program to a tracepoint flips its static key, which rewrites kernel
# text (int3 and IPIs) where other vCPUs run it — in __schedule for
# sched_switch. Under TCG's multi-threaded emulation that rewrite sometimes
# left two vCPUs stuck at the patched instruction (RCU stall, then a silent
# guest, seen in the BPF source and live daemon tests). With the keys on
# already, an attach only adds a probe. A real host patches as usual; KVM
# guests run as-is.
if [ "$ELFEN_VM" = tcg ]; then
  T=/sys/kernel/tracing
  [ -e "$T/events" ] || mount -t tracefs tracefs "$T" 2>/dev/null
  on=""
  # the tracepoints of crates/bpf's programs (src/bpf/sched.bpf.c), which the
  # guest's tests attach
  for ev in sched/sched_switch sched/sched_wakeup; do
    if echo 1 >"$T/events/$ev/enable" 2>/dev/null; then on="$on ${ev#*/}"; fi
  done
  echo 0 >"$T/tracing_on" 2>/dev/null
  mark "tracepoints kept on for TCG (their static keys never flip during the tests; trace buffer off):${on:- none}"
fi

t0=$(date +%s.%N)
if done_before vm cgroup-v2-only; then
  :
elif [ "$fs" = cgroup2fs ] && [ ! -d /sys/fs/cgroup/unified ] && [ ! -d /sys/fs/cgroup/cpuset ]; then
  record vm cgroup-v2-only pass 0 "/sys/fs/cgroup is cgroup2fs, no v1 hierarchy; controllers: $(cat /sys/fs/cgroup/cgroup.controllers)"
else
  record vm cgroup-v2-only fail 0 "/sys/fs/cgroup is $fs"
fi
sib=$(for c in 0 1 2 3; do cat /sys/devices/system/cpu/cpu$c/topology/thread_siblings_list 2>/dev/null; done | paste -sd' ' -)
if done_before vm smt-2x2; then
  :
elif [ "$(nproc)" = 4 ] && [ "$sib" = "0-1 0-1 2-3 2-3" ]; then
  record vm smt-2x2 pass 0 "4 CPUs, siblings 0-1 and 2-3 (emulated SMT: proves topology, pairing and multi-pair code paths, not SMT interference)"
else
  record vm smt-2x2 fail 0 "$(nproc) CPUs, siblings of cpu0-3: $sib"
fi

# judge KIND SUITE TEST RC LOG TLOG SECS: records the verdict of
# classify.sh on a test or scenario that ran, and counts its second runs
# (elfen_cmd::rerun's records in its test log).
judge() {
  local kind="$1" suite="$2" t="$3" rc="$4" log="$5" tlog="$6" secs="$7" verdict status note
  verdict=$(TEST_TIMEOUT_S="$TEST_TIMEOUT_S" bash "$P/guest/classify.sh" "$kind" "$t" "$rc" "$log" "$tlog")
  status=${verdict%%$'\t'*}
  note=${verdict#*$'\t'}
  [ -n "$status" ] || { status=fail; note="classify.sh gave no verdict"; }
  if [ -s "$tlog" ]; then
    awk -F'\t' -v s="$suite" -v t="$t" '$1 == "rerun" { printf "%s\t%s\tits own second run (elfen_cmd::rerun); the first failed: %s\n", s, t, $4 }' "$tlog" >>"$R/reruns.tsv"
    sync "$R/reruns.tsv"
  fi
  [ -z "$AGAIN" ] || note="$AGAIN${note:+; $note}"
  record "$suite" "$t" "$status" "$secs" "$note"
}

# 3a. test binaries: "suite<TAB>binary<TAB>libtest filter (optional)"
run_test() {
  local suite="$1" bin="$2" t="$3" log tlog rc s0 secs
  log="$R/logs/${suite//\//.}.${t//::/.}.log"
  tlog="$R/logs/${suite//\//.}.${t//::/.}.tsv"
  begin "$suite" "$t" || return 0
  : >"$tlog"
  s0=$(date +%s.%N)
  heartbeat "$suite $t" &
  local beat=$!
  ELFEN_TEST_LOG="$tlog" timeout -k 10 "$TEST_TIMEOUT_S" "$bin" --exact "$t" --nocapture --test-threads=1 </dev/null >"$log" 2>&1
  rc=$?
  kill "$beat" 2>/dev/null
  wait "$beat" 2>/dev/null
  secs=$(awk -v a="$s0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  judge test "$suite" "$t" "$rc" "$log" "$tlog" "$secs"
}

while IFS=$'\t' read -r -u 3 suite bin filter; do
  [ -n "$suite" ] || continue
  if [ ! -x "$bin" ]; then
    record "$suite" "(binary)" fail 0 "$bin is missing in the guest"
    continue
  fi
  # shellcheck disable=SC2086 # the filter is libtest arguments
  mapfile -t tests < <("$bin" --list --format terse $filter 2>"$R/logs/${suite//\//.}.list.err" | sed -n 's/: test$//p')
  if [ "${#tests[@]}" -eq 0 ]; then
    record "$suite" "(list)" fail 0 "no tests listed by $bin $filter"
    continue
  fi
  mark "$suite: ${#tests[@]} tests"
  for t in "${tests[@]}"; do
    [[ -z "$SELECT" || "$suite $t" =~ $SELECT ]] || continue
    done_before "$suite" "$t" && continue
    run_test "$suite" "$bin" "$t"
  done
done 3<"$P/tests.tsv"

# 3b. scenarios: shell scripts (scripts/vm/scenarios/*.sh) sourcing
# guest/lib.sh; exit 0 passed, 77 skipped (recorded by lib.sh's `skip NEED
# REASON`), anything else failed; their "note: " lines become the result's
# note.
for s in "$P"/scenarios/*.sh; do
  [ -f "$s" ] || continue
  name=$(basename "$s" .sh)
  [[ -z "$SELECT" || "scenario $name" =~ $SELECT ]] || continue
  done_before scenario "$name" && continue
  log="$R/logs/scenario.$name.log"
  tlog="$R/logs/scenario.$name.tsv"
  begin scenario "$name" || continue
  : >"$tlog"
  mark "scenario $name"
  s0=$(date +%s.%N)
  heartbeat "scenario $name" &
  beat=$!
  ELFEN_TEST_LOG="$tlog" ELFEN_SCENARIO="$name" timeout -k 10 "$TEST_TIMEOUT_S" bash "$s" </dev/null >"$log" 2>&1
  rc=$?
  kill "$beat" 2>/dev/null
  wait "$beat" 2>/dev/null
  secs=$(awk -v a="$s0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  sed 's/^/@@elfen-vm   | /' "$log"
  judge scenario scenario "$name" "$rc" "$log" "$tlog" "$secs"
done

total=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.0f", b - a }')
: >"$R/current"
journalctl -b --no-pager -o short-monotonic >"$R/journal.txt" 2>/dev/null
echo "$total" >"$R/seconds"
touch "$R/complete"
sync
mark "done: $(cut -f3 "$SUMMARY" | sort | uniq -c | paste -sd, -) in ${total} s"
