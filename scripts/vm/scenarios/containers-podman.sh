#!/bin/bash
# The LC and the batch as real podman containers (rootful, systemd's cgroup
# manager: machine.slice/libpod-<id>.scope) on a systemd host with the unified
# cgroup v2 hierarchy (the image and the containers: guest/podman.sh): the LC
# is the daemon's synthetic LC, the batch Debian's unmodified stress-ng.
# elfen daemon selects them with [lc] container = NAME and [[batch]] container
# = NAME, in mode idle and then guard, then both by id. Checks: the LC line
# follows the LC container's run time, the batch container's scope gets its
# knobs (cpuset.cpus on the batch lanes, cpu.idle 1; in guard a guard
# occupies the partner lane) and gets them back at the stop; across rm -f +
# run of the LC container with the same name (a new id, a new scope) the
# daemon follows it and says so (the time to follow: median and max over the
# restarts); a batch container restarted gets its knobs again, one made
# anew under its name (a new id and scope) is followed there, and knobs
# systemd writes over (set-property AllowedCPUs=, CPUWeight=) are written
# again; one gone for longer than group_gone_ms is lost, as on_group_lost
# says (continue: carried on, and back it is not lost; stop: exit 3). Freeze
# mode and podman's pause: freezer-podman.sh.
# shellcheck disable=SC2016 # eventually's expressions are evaluated at each poll
. "$(dirname "$0")/../guest/lib.sh"
. "$(dirname "$0")/../guest/podman.sh"
set -u

PORT=9465
WINDOW_S=$((2 * SLACK))
RESTARTS=${ELFEN_VM_CONTAINER_RESTARTS:-10}

podman_needs
trap podman_cleanup EXIT

# --- the containers -----------------------------------------------------------
podman --version
start_containers

cpus_before=$(cg_read "$batch_scope" cpuset.cpus.effective)
idle_before=$(cg_read "$batch_scope" cpu.idle)
echo "before: $batch_scope cpuset.cpus.effective='$cpus_before' cpu.idle='$idle_before'"

# stopped MODE: the daemon stops cleanly and gives everything back
stopped() {
  stop_daemon
  local rc=$?
  tail -n 15 "$WORK/daemon.log" | sed 's/^/  daemon| /'
  check "$1: the daemon stopped cleanly (exit 0)" test "$rc" = 0
  # (an empty cpuset.cpus cannot be written back on a populated group: the
  # daemon writes the parent's CPUs, which the group had in effect before)
  check "$1: the batch scope's CPUs restored ($cpus_before in effect)" test "$(cg_read "$batch_scope" cpuset.cpus.effective)" = "$cpus_before"
  check "$1: the batch scope's cpu.idle restored ($idle_before)" test "$(cg_read "$batch_scope" cpu.idle)" = "$idle_before"
  check "$1: the page is removed" test ! -e /dev/shm/elfen
  check "$1: the containers still run" test "$(podman inspect -f '{{.State.Running}}' "$LC" "$BATCH" | sort -u)" = true
}

started=$(date +%s.%N)
for mode in idle guard; do
  run_daemon "$mode" "$LC" "$BATCH"
  check "$mode: the daemon found the LC container" eventually 10 'grep -q "libpod-$lc_id.scope" "$WORK/daemon.log"'
  check "$mode: the batch scope confined to the batch lanes 1,3" eventually 5 'test "$(cg_read "$batch_scope" cpuset.cpus)" = "1,3"'
  check "$mode: the batch scope is cpu.idle" eventually 5 'test "$(cg_read "$batch_scope" cpu.idle)" = 1'
  window "$mode"
  stopped "$mode"
done

# --- by id ------------------------------------------------------------------------
run_daemon idle "${lc_id:0:12}" "$batch_id"
check "by id: the daemon found the LC container" eventually 10 'grep -q "libpod-$lc_id.scope" "$WORK/daemon.log"'
check "by id: the batch scope is cpu.idle" eventually 5 'test "$(cg_read "$batch_scope" cpu.idle)" = 1'
stopped "by id"

# --- followed across restarts -------------------------------------------------------
run_daemon idle "$LC" "$BATCH"
check "restarts: the batch scope is cpu.idle" eventually 5 'test "$(cg_read "$batch_scope" cpu.idle)" = 1'
follows=()
HZ=$(getconf CLK_TCK 2>/dev/null || echo 100)
# started_at PID: when a process started, epoch seconds (its start in clock
# ticks since boot against the uptime, read with the time of day)
started_at() {
  local now up st
  now=$(date +%s.%N)
  read -r up _ </proc/uptime
  st=$(awk '{ print $22 }' "/proc/$1/stat")
  calc "$now - ($up - $st / $HZ)"
}
for i in $(seq 1 "$RESTARTS"); do
  podman rm -f -t 0 "$LC" >/dev/null
  run_lc >/dev/null
  lc_id=$(cid "$LC")
  lc_scope=$(scope "$lc_id")
  pid=$(podman inspect -f '{{.State.Pid}}' "$LC")
  t_start=$(started_at "$pid")
  # the time from the new container's first process to the daemon's line
  # naming its scope (the log's own time stamps)
  if eventually 30 'grep -q "LC service.s groups now: .*libpod-$lc_id.scope" "$WORK/daemon.log"'; then
    ts=$(grep "LC service.s groups now: .*libpod-$lc_id.scope" "$WORK/daemon.log" | head -n 1 | awk '{ print $1 }')
    f=$(calc "$(date -d "$ts" +%s.%N) - $t_start")
    follows+=("$f")
    echo "restart $i: new id ${lc_id:0:12}, followed $f s after its first process started"
  else
    echo "FAIL: restart $i: the daemon did not say it follows the new LC container ${lc_id:0:12} within $((30 * SLACK)) s"
    FAILS=$((FAILS + 1))
  fi
done
grep "LC service's groups now" "$WORK/daemon.log" | tail -n 2 | sed 's/^/  daemon| /'
if [ ${#follows[@]} -gt 0 ]; then
  sorted=$(printf '%s\n' "${follows[@]}" | sort -g)
  n=${#follows[@]}
  med=$(sed -n "$(((n + 1) / 2))p" <<<"$sorted")
  max=$(tail -n 1 <<<"$sorted")
  note "LC container rm -f + run: followed in median $med s, max $max s over $n restarts (from the new container's first process to the daemon's line naming its scope; rescan_ms 1000)"
  check "each restart followed within the rescan interval and the look's slack (<= 2 x SLACK s)" holds "$max <= 2 * $SLACK"
fi
window "after restarts"

# the batch container: podman restart keeps its id and scope
podman restart -t 0 "$BATCH" >/dev/null
check "a batch container restarted (same id) gets cpu.idle again" eventually 10 'test "$(cg_read "$batch_scope" cpu.idle)" = 1'
check "... and its cpuset again" eventually 10 'test "$(cg_read "$batch_scope" cpuset.cpus)" = "1,3"'
grep "batch batch:" "$WORK/daemon.log" | tail -n 3 | sed 's/^/  daemon| /'

# the batch container made anew (rm -f + run): a new id and scope, which the
# daemon moves the group to, with its knobs; what it wrote there is restored
podman rm -f -t 0 "$BATCH" >/dev/null
run_batch >/dev/null
batch_id=$(cid "$BATCH")
batch_scope=$(scope "$batch_id")
check "a batch container made anew has a new scope" test -n "$batch_scope"
check "... the daemon follows it there" eventually 10 'grep -q "batch batch: .*made anew (cgroup .*libpod-$batch_id.scope" "$WORK/daemon.log"'
check "... its new scope is cpu.idle" eventually 10 'test "$(cg_read "$batch_scope" cpu.idle)" = 1'
check "... and confined to the batch lanes 1,3" eventually 10 'test "$(cg_read "$batch_scope" cpuset.cpus)" = "1,3"'
grep "batch batch:" "$WORK/daemon.log" | tail -n 3 | sed 's/^/  daemon| /'

# what systemd writes over the daemon's knobs (systemctl set-property, as an
# operator's change or podman's own settings do) is written again, one knob
# at a time: the daemon's line names the knob it wrote again
unit=${batch_scope##*/}
# again_lines KNOB: the daemon's lines so far that wrote KNOB again on the
# batch scope
again_lines() { grep -c "batch batch: .*$1 on .*changed under the daemon" "$WORK/daemon.log"; }
knob_again() { # PROPERTY KNOB_WRITTEN FILE VALUE
  local t0 t1 n0
  n0=$(again_lines "$2")
  t0=$(date +%s.%N)
  systemctl set-property --runtime "$unit" "$1"
  if eventually 10 "test \$(again_lines '$2') -gt $n0"; then
    t1=$(date +%s.%N)
    note "systemd's $1 on the batch scope: $2 written again within $(calc "$t1 - $t0") s (rescan_ms 1000)"
  else
    echo "FAIL: systemd's $1 on the batch scope: the daemon did not write $2 again within $((10 * SLACK)) s"
    FAILS=$((FAILS + 1))
  fi
  check "... $3 is $4 again" eventually 5 "test \"\$(cg_read \"\$batch_scope\" $3)\" = '$4'"
}
knob_again AllowedCPUs=0-3 cpus=1,3 cpuset.cpus 1,3
knob_again CPUWeight=100 cpu.idle=1 cpu.idle 1
stopped "a batch container made anew"

# --- a batch container gone for longer than group_gone_ms --------------------------
# with on_group_lost = "continue": said LOST, the daemon carries on, and the
# container back (podman start: the same id, its scope made anew) is no
# longer lost and gets its knobs again
run_daemon idle "$LC" "$BATCH" $'group_gone_ms = 3000\non_group_lost = "continue"'
check "gone: the batch scope is cpu.idle" eventually 5 'test "$(cg_read "$batch_scope" cpu.idle)" = 1'
podman stop -t 0 "$BATCH" >/dev/null
t0=$(date +%s.%N)
if eventually 15 'grep -q "LOST: batch batch .*has been gone for .*group_gone_ms = 3000.*carries on" "$WORK/daemon.log"'; then
  note "a batch container stopped: said LOST $(calc "$(date +%s.%N) - $t0") s after podman stop (group_gone_ms 3000, rescan_ms 1000)"
else
  echo "FAIL: a batch container stopped for longer than group_gone_ms was not said LOST within $((15 * SLACK)) s"
  FAILS=$((FAILS + 1))
fi
check "... and the daemon carries on (on_group_lost = continue)" kill -0 "$DAEMON_PID"
podman start "$BATCH" >/dev/null
batch_scope=$(scope "$batch_id")
check "gone and back: no longer lost, said so" eventually 15 'grep -q "batch batch: .*is back .*it had been lost" "$WORK/daemon.log"'
check "... and its scope is cpu.idle again" eventually 5 'test "$(cg_read "$batch_scope" cpu.idle)" = 1'
grep -E "batch batch:|LOST" "$WORK/daemon.log" | tail -n 3 | sed 's/^/  daemon| /'
stopped "gone and back"

# with on_group_lost = "stop" (the default): the daemon restores everything
# and exits with status 3
run_daemon idle "$LC" "$BATCH" 'group_gone_ms = 3000'
podman stop -t 0 "$BATCH" >/dev/null
t0=$(date +%s.%N)
if eventually 20 '! kill -0 "$DAEMON_PID" 2>/dev/null'; then
  wait "$DAEMON_PID"
  rc=$?
  DAEMON_PID=
  note "a batch container stopped, on_group_lost = stop: the daemon exited $(calc "$(date +%s.%N) - $t0") s after podman stop"
  check "gone, on_group_lost = stop: the daemon exits with status 3" test "$rc" = 3
  check "... having said LOST" grep -q "LOST: batch batch .*the daemon stops" "$WORK/daemon.log"
  check "... and removed its page" test ! -e /dev/shm/elfen
else
  echo "FAIL: a batch container stopped for longer than group_gone_ms: the daemon still runs after $((20 * SLACK)) s (on_group_lost = stop)"
  FAILS=$((FAILS + 1))
  stop_daemon
fi
podman start "$BATCH" >/dev/null
note "scenario wall time in the guest: $(calc "$(date +%s.%N) - $started") s from the first daemon start"
finish
