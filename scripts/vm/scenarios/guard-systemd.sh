#!/bin/bash
# End to end on a systemd host with the unified cgroup v2 hierarchy: the LC is
# a .service, the batch a command in a unit of batch.slice, and elfen daemon
# runs from the packaged unit (packaging/systemd/elfen-daemon.service) in guard
# mode, selecting both by cgroup path. Checks: the plan pairs SMT siblings
# (0:1, 2:3: two pairs), the daemon starts, confines batch.slice to the batch
# lanes with cpu.idle, its LC line follows the LC, the guard occupies the
# partner lane, and a stop gives everything back. Prints the LC line's busy
# time against the LC's run time and the guard's occupation. The SMT topology
# is emulated: this proves the topology, pairing and multi-pair code paths,
# not SMT interference.
# shellcheck disable=SC2016 # eventually's expressions are evaluated at each poll
. "$(dirname "$0")/../guest/lib.sh"
set -u

ELFEN=/usr/bin/elfen  # where the packaged unit runs it
PORT=9464
LC_UNIT=elfen-lc.service
LC_GROUP=system.slice/$LC_UNIT
WINDOW_S=$((2 * SLACK))

[ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ] || skip cgroup-v2:cpu "the unified cgroup v2 hierarchy at /sys/fs/cgroup, with the cpu controller"
[ -d /run/systemd/system ] || skip systemd "systemd as PID 1"

cleanup() {
  systemctl stop elfen-daemon.service elfen-batch.service "$LC_UNIT" batch.slice 2>/dev/null
  rm -f /etc/systemd/system/{elfen-daemon.service,elfen-batch.service,$LC_UNIT,batch.slice} "$ELFEN"
  systemctl daemon-reload
}
trap cleanup EXIT

# --- install as an operator would -------------------------------------------
install -m 0755 "$ELFEN_BIN" "$ELFEN"
install -D -m 0644 /dev/stdin /etc/elfen/daemon.toml <<EOF
# the LC service and the batch slice, by cgroup path; guard mode
[metrics]
listen = "127.0.0.1:$PORT"

[lc]
cgroup = "/sys/fs/cgroup/$LC_GROUP"

[[batch]]
name = "batch"
mode = "guard"
cgroup = "batch.slice"
EOF
install -m 0644 "$ELFEN_REPO/packaging/systemd/elfen-daemon.service" /etc/systemd/system/
cat >/etc/systemd/system/$LC_UNIT <<EOF
[Unit]
Description=a synthetic LC service (busy 300 ms, idle 200 ms, on cpu 0)
[Service]
ExecStart=$ELFEN daemon lc-helper --name=lcsvc --cpu 0 --busy-us 300000 --idle-min-us 200000 --idle-max-us 200000
EOF
# The slice turns the cpu and cpuset controllers on for its groups (systemd
# enables a controller where a unit sets one of its properties).
cat >/etc/systemd/system/batch.slice <<EOF
[Unit]
Description=batch work that borrows the LC's idle lanes
[Slice]
CPUWeight=100
AllowedCPUs=0-3
EOF
cat >/etc/systemd/system/elfen-batch.service <<EOF
[Unit]
Description=an unmodified batch program: two spinners
[Service]
Slice=batch.slice
ExecStart=/bin/sh -c '$ELFEN daemon spin-helper & exec $ELFEN daemon spin-helper'
EOF
systemctl daemon-reload
# The slice first: starting it turns the cpuset controller on in the root,
# and a kernel before 6.2 then resets the CPU affinity of every task below
# (an LC pinned before would lose its pin to cpu 0).
systemctl start batch.slice
systemctl start "$LC_UNIT" elfen-batch.service
check "the LC service runs" systemctl is-active -q "$LC_UNIT"
lc_cpus() {
  local pid
  pid=$(systemctl show -p MainPID --value "$LC_UNIT")
  sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' "/proc/$pid/status"
}
check "the LC is pinned to cpu 0" eventually 5 'test "$(lc_cpus)" = 0'
check "the batch service runs in batch.slice" eventually 10 'test -n "$(cg_read batch.slice/elfen-batch.service cgroup.procs)"'

plan=$("$ELFEN" daemon --config /etc/elfen/daemon.toml --check 2>&1)
echo "$plan" | sed 's/^/  check| /'
check "the plan pairs the SMT siblings: two pairs 0:1 and 2:3" \
  grep -q 'pairs 0:1,2:3 from SMT siblings' <<<"$plan"

subtree_before=$(cg_read "" cgroup.subtree_control)
cpus_before=$(cg_read batch.slice cpuset.cpus)
idle_before=$(cg_read batch.slice cpu.idle)
echo "before: batch.slice cpuset.cpus=$cpus_before cpu.idle=$idle_before; root subtree_control: $subtree_before"

# --- run ---------------------------------------------------------------------
systemctl start elfen-daemon.service
check "the daemon unit is active" systemctl is-active -q elfen-daemon.service
check "the metrics endpoint answers" eventually 10 'test -n "$(metric $PORT elfen_controller_alive)"'
journal() { journalctl -u elfen-daemon.service -o cat --no-pager; }
check "the daemon runs" eventually 10 'journal | grep -q "running (SIGTERM"'
check "the daemon found the LC service" eventually 10 'journal | grep -q "LC service found\|LC service.s groups now: /sys/fs/cgroup/$LC_GROUP"'
check "batch.slice confined to the batch lanes 1,3" eventually 5 'test "$(cg_read batch.slice cpuset.cpus)" = "1,3"'
check "batch.slice is cpu.idle" test "$(cg_read batch.slice cpu.idle)" = 1
check "a guard per pair (lanes 1 and 3)" test -n "$(metric $PORT 'elfen_guard_occupations_total{lane="3",cpu="3"}')"

sample() {
  echo "$(date +%s.%N) $(metric $PORT 'elfen_lc_busy_seconds_total{lane="0",cpu="0"}') \
$(cg_usage_s "$LC_GROUP") \
$(metric $PORT 'elfen_guard_occupied_seconds_total{lane="1",cpu="1"}') \
$(metric $PORT 'elfen_guard_occupied_seconds_total{lane="3",cpu="3"}') \
$(cg_usage_s batch.slice)"
}
read -r t0 line0 lc0 g10 g30 b0 <<<"$(sample)"
sleep "$WINDOW_S"
read -r t1 line1 lc1 g11 g31 b1 <<<"$(sample)"
win=$(calc "$t1 - $t0")
line=$(calc "$line1 - $line0")
lc=$(calc "$lc1 - $lc0")
g1=$(calc "$g11 - $g10")
g3=$(calc "$g31 - $g30")
batch=$(calc "$b1 - $b0")
echo "window ${win} s: LC ran ${lc} s; its line said busy ${line} s; guard lane 1 occupied ${g1} s, guard lane 3 ${g3} s; batch ran ${batch} s on 2 batch lanes"
check "the LC ran in the window" holds "$lc > 0.1 * $win"
check "the LC stayed on cpu 0" test "$(lc_cpus)" = 0
# as the live test: the line follows the LC for most of its run time
check "the LC line said busy while the LC ran (>= half its run time)" holds "$line >= 0.5 * $lc"
check "the guard occupied the partner lane while the line was busy" holds "$g1 > 0"
note "LC line busy ${line} s vs LC run time ${lc} s ($(calc "100 * $line / ($lc > 0 ? $lc : 1)") %) in ${win} s"
note "guard occupation ${g1} s on lane 1 ($(calc "100 * $g1 / ($line > 0 ? $line : 1)") % of the line's busy time; not asserted: a matter of speed under ${ELFEN_VM^^}), ${g3} s on lane 3 (its LC lane idle)"
note "batch ran ${batch} s of $(calc "2 * $win") s on the batch lanes"
note "SMT topology emulated: proves topology, pairing and multi-pair code paths, not SMT interference"

# --- stop: everything back ----------------------------------------------------
systemctl stop elfen-daemon.service
journal | tail -n 25 | sed 's/^/  daemon| /'
check "the daemon stopped cleanly (exit 0)" test "$(systemctl show -p ExecMainStatus --value elfen-daemon.service)" = 0
check "batch.slice cpuset.cpus restored ($cpus_before)" test "$(cg_read batch.slice cpuset.cpus)" = "$cpus_before"
check "batch.slice cpu.idle restored ($idle_before)" test "$(cg_read batch.slice cpu.idle)" = "$idle_before"
# (the unit's Delegate=yes makes systemd turn every controller on down to the
# unit while it runs; systemd turns them off again after the stop)
check "the root's subtree_control as before" eventually 5 'test "$(cg_read "" cgroup.subtree_control)" = "$subtree_before"'
check "no group of the daemon left" test -z "$(ls -d /sys/fs/cgroup/elfen-daemon-* 2>/dev/null)"
check "the page is removed" test ! -e /dev/shm/elfen
check "the state file is removed" test ! -e /run/elfen/daemon-state.json
check "the LC still runs" systemctl is-active -q "$LC_UNIT"
check "the batch still runs" systemctl is-active -q elfen-batch.service
finish
