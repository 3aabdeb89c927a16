# shellcheck shell=bash
# shellcheck disable=SC2016 # eventually's expressions are evaluated at each poll
# Sourced by the podman scenarios (scripts/vm/scenarios/containers-podman.sh,
# daemonset-podman.sh) after lib.sh: the image their containers run (no
# registry in the guest: podman imports /opt/elfen/container-root.tar, a tree
# with Debian's merged /usr links and nothing else, and each container mounts
# the guest's /usr read only, so it runs the guest's programs and libraries,
# elfen included, in cgroups and namespaces of its own), the LC and batch
# containers, and how to find a container's scope.

ELFEN=/usr/bin/elfen
LC=elfen-lc
BATCH=elfen-batch
IMAGE=localhost/elfen-root
ROOT_TAR=/opt/elfen/container-root.tar

WORK=$(mktemp -d)
DAEMON_PID=

# podman_needs: skips the scenario where podman cannot run (cgroup v2,
# systemd, podman), fails it where the image's tar is missing
podman_needs() {
  [ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ] || skip cgroup-v2:cpu "the unified cgroup v2 hierarchy at /sys/fs/cgroup, with the cpu controller"
  [ -d /run/systemd/system ] || skip systemd "systemd as PID 1"
  command -v podman >/dev/null || skip program:podman "podman (scripts/vm/packages.list)"
  [ -f "$ROOT_TAR" ] || { echo "FAIL: the containers' root file system $ROOT_TAR is missing (scripts/vm/image.sh)"; exit 1; }
}

PODMAN_RUN=(podman run -d --network none --pull never -v /usr:/usr:ro)
# run_lc [BUSY_US IDLE_US]: the LC container, the daemon's synthetic LC
# (busy 300 ms, idle 200 ms unless given) on cpu 0
run_lc() {
  local busy=${1:-300000} idle=${2:-200000}
  "${PODMAN_RUN[@]}" --name "$LC" --cpuset-cpus 0 "$IMAGE" \
    "$ELFEN" daemon lc-helper --name=lcsvc --cpu 0 --busy-us "$busy" --idle-min-us "$idle" --idle-max-us "$idle"
}
# run_batch: the batch container, Debian's unmodified stress-ng with two
# CPU workers (integer work: its default mix of methods dies of SIGILL on
# the CPU TCG emulates)
run_batch() {
  "${PODMAN_RUN[@]}" --name "$BATCH" "$IMAGE" /usr/bin/stress-ng --cpu 2 --cpu-method int64 --quiet
}
# scope ID: a container's cgroup, below /sys/fs/cgroup
scope() {
  local d
  d=$(find /sys/fs/cgroup -maxdepth 4 -type d -name "libpod-$1.scope" -print -quit)
  printf '%s\n' "${d#/sys/fs/cgroup/}"
}
cid() { podman inspect -f '{{.Id}}' "$1"; }

# start_containers [BUSY_US IDLE_US]: elfen installed where the containers
# see it, the image imported, the LC (run_lc's phases) and batch containers
# started (timed: notes), their ids
# and scopes in lc_id, batch_id, lc_scope, batch_scope; the scenario ends
# (failed) when a container has no scope
start_containers() {
  # shellcheck disable=SC2034 # read by the expression check evaluates
  local t lc_args=("$@")
  install -m 0755 "$ELFEN_BIN" "$ELFEN"
  t=$(date +%s.%N)
  check "podman imports the root file system" podman import -q "$ROOT_TAR" "$IMAGE"
  note "podman import: $(calc "$(date +%s.%N) - $t") s"
  t=$(date +%s.%N)
  check "the LC container runs" eval 'run_lc "${lc_args[@]}" >/dev/null'
  note "podman run (the LC): $(calc "$(date +%s.%N) - $t") s"
  check "the batch container runs" eval 'run_batch >/dev/null'
  lc_id=$(cid "$LC")
  batch_id=$(cid "$BATCH")
  lc_scope=$(scope "$lc_id")
  batch_scope=$(scope "$batch_id")
  echo "LC $lc_id in $lc_scope; batch $batch_id in $batch_scope"
  check "the LC container has a scope" test -n "$lc_scope"
  check "the batch container has a scope" test -n "$batch_scope"
  if [ -z "$lc_scope" ] || [ -z "$batch_scope" ]; then
    local c
    for c in "$LC" "$BATCH"; do
      echo "$c: $(podman inspect -f '{{.State.Status}} exit {{.State.ExitCode}} {{.State.Error}}' "$c" 2>&1); its output:"
      podman logs "$c" 2>&1 | tail -n 20 | sed "s/^/  $c| /"
    done
    finish
  fi
  check "the LC container's processes are in its scope" eventually 10 'grep -rqs . /sys/fs/cgroup/$lc_scope/cgroup.procs /sys/fs/cgroup/$lc_scope/*/cgroup.procs'
  check "the batch container's stress-ng runs" eventually 10 'holds "$(cg_usage_s "$batch_scope") > 0.1"'
}

# run_daemon MODE LC_SELECTOR BATCH_SELECTOR [TOP_LINES]: starts the daemon
# on the host (its metrics on $PORT, its files and log, daemon.log, in
# $WORK) in the background, its pid in DAEMON_PID; waits for it to run
run_daemon() {
  cat >"$WORK/daemon.toml" <<EOF
${4:-}
[metrics]
listen = "127.0.0.1:$PORT"

[lc]
container = "$2"

[[batch]]
name = "batch"
mode = "$1"
container = "$3"
EOF
  local plan
  plan=$("$ELFEN" daemon --config "$WORK/daemon.toml" --check 2>&1)
  echo "$plan" | sed 's/^/  check| /'
  check "--check ($1) finds the LC container ($2)" grep -q "libpod-$lc_id.scope" <<<"$plan"
  check "--check ($1) finds the batch container ($3)" grep -q "libpod-$batch_id.scope" <<<"$plan"
  : >"$WORK/daemon.log"
  # its own time stamps on each line (without $JOURNAL_STREAM)
  env -u JOURNAL_STREAM "$ELFEN" daemon --config "$WORK/daemon.toml" 2>"$WORK/daemon.log" &
  DAEMON_PID=$!
  check "the daemon runs ($1)" eventually 10 'grep -q "running (SIGTERM" "$WORK/daemon.log"'
  check "the metrics endpoint answers ($1)" eventually 10 'test -n "$(metric $PORT elfen_controller_alive)"'
}


# stop_daemon: SIGTERM to the daemon run_daemon started; its exit status
stop_daemon() {
  [ -n "$DAEMON_PID" ] || return 0
  kill -TERM "$DAEMON_PID" 2>/dev/null
  wait "$DAEMON_PID"
  local rc=$?
  DAEMON_PID=
  return $rc
}

# podman_cleanup: the daemon stopped, the containers and the image removed,
# elfen and $WORK removed (the scenario's EXIT trap)
podman_cleanup() {
  stop_daemon
  podman rm -f -t 0 "$LC" "$BATCH" >/dev/null 2>&1
  podman rmi -f "$IMAGE" >/dev/null 2>&1
  rm -rf "$WORK" "$ELFEN"
}

# window MODE [WHERE]: over WINDOW_S seconds, the LC line (the daemon's
# metrics on $PORT) against the LC container's run time (its scope's
# cpu.stat), checked and noted as "MODE[WHERE]: …"; in guard mode also the
# guard's occupation of the partner lane 1
window() {
  local mode="$1" at="$1${2:-}" t0 line0 lc0 g0 t1 line1 lc1 g1 win line lc g
  sample() {
    echo "$(date +%s.%N) $(metric "$PORT" 'elfen_lc_busy_seconds_total{lane="0",cpu="0"}') \
$(cg_usage_s "$lc_scope") $(metric "$PORT" 'elfen_guard_occupied_seconds_total{lane="1",cpu="1"}')"
  }
  read -r t0 line0 lc0 g0 <<<"$(sample)"
  sleep "$WINDOW_S"
  read -r t1 line1 lc1 g1 <<<"$(sample)"
  win=$(calc "$t1 - $t0")
  line=$(calc "${line1:-0} - ${line0:-0}")
  lc=$(calc "$lc1 - $lc0")
  echo "$at: window $win s: the LC container ran $lc s; its line said busy $line s"
  check "$at: the LC container ran in the window" holds "$lc > 0.1 * $win"
  check "$at: the LC line said busy while the LC container ran (>= half its run time)" holds "$line >= 0.5 * $lc"
  check "$at: the LC line said busy no longer than the LC container could run (<= 1.5 x its run time)" holds "$line <= 1.5 * $lc"
  note "$at: LC line busy $line s vs the LC container's run time $lc s ($(calc "100 * $line / ($lc > 0 ? $lc : 1)") %) in $win s"
  if [ "$mode" = guard ]; then
    g=$(calc "${g1:-0} - ${g0:-0}")
    check "$at: the guard occupied the partner lane 1" holds "$g > 0"
    note "$at: lane 1 occupied $g s ($(calc "100 * $g / ($line > 0 ? $line : 1)") % of the line's busy time; not asserted: a matter of speed under ${ELFEN_VM^^})"
  fi
}
