#!/bin/bash
# Freeze mode on a podman container, beside what podman and systemd write on
# the freezer (the containers: guest/podman.sh; the LC container busy for
# 60 s at a time, idle 1 s, so that commands land inside a busy period; its
# line is made idle by pausing it).
#
# podman pause freezes a cgroup below the container's scope (crun's
# sub-group), not the scope's cgroup.freeze the daemon writes: checked that
# the daemon's thaw does not end podman's pause, and podman's unpause does
# not end the daemon's freeze. systemctl freeze / thaw of the scope's unit
# write the daemon's file: a freeze + thaw while the daemon holds the batch
# frozen thaws it under the daemon (said, frozen again); a freeze while the
# daemon has it thawed is the owner's (said, left frozen while the LC is idle
# and at the daemon's stop, systemd says frozen); a thaw gives it back (said,
# frozen while the LC is busy again).
# shellcheck disable=SC2016 # eventually's expressions are evaluated at each poll
. "$(dirname "$0")/../guest/lib.sh"
. "$(dirname "$0")/../guest/podman.sh"
set -u

PORT=9467

podman_needs
trap podman_cleanup EXIT
start_containers 60000000 1000000
started=$(date +%s.%N)
unit=${batch_scope##*/}

# frozen_now [GROUP]: the kernel says the group (the batch scope) is frozen
frozen_now() { grep -q '^frozen 1' "/sys/fs/cgroup/${1:-$batch_scope}/cgroup.events"; }
scope_freeze() { cg_read "$batch_scope" cgroup.freeze; }
said() { grep -c "batch batch: .*$1" "$WORK/daemon.log"; }
# lc_idle: the LC container paused (its line idle): the daemon thaws the batch
lc_idle() {
  podman pause "$LC" >/dev/null
  check "the LC container paused: the daemon thaws the batch scope" eventually 10 'test "$(scope_freeze)" = 0'
}
lc_busy() { podman unpause "$LC" >/dev/null; }
# sysd freeze|thaw: systemctl on the batch scope's unit, bounded (systemd
# waits for the kernel's frozen event, which a group frozen already never
# sends; the write is made either way)
sysd() { timeout $((2 * SLACK)) systemctl "$1" "$unit" || echo "systemctl $1 $unit: status $?"; }

run_daemon freeze "$LC" "$BATCH"
check "the batch scope is frozen while the LC is busy" eventually 20 'frozen_now'

# --- podman pause: a group of its own below the scope ------------------------------------
podman pause "$BATCH" >/dev/null
paused=$(grep -l '^1' "/sys/fs/cgroup/$batch_scope"/*/cgroup.freeze 2>/dev/null | head -n 1)
paused=${paused%/cgroup.freeze}
paused=${paused#/sys/fs/cgroup/}
echo "podman pause froze ${paused:-no group below the scope}; the scope's cgroup.freeze: $(scope_freeze)"
check "podman pause freezes a group below the batch scope" test -n "$paused"
lc_idle
check "podman's pause stays while the daemon has the scope thawed" frozen_now "$paused"
check "... as podman says" test "$(podman inspect -f '{{.State.Status}}' "$BATCH")" = paused
lc_busy
check "the daemon freezes the scope again while the LC is busy" eventually 10 'frozen_now'
podman unpause "$BATCH" >/dev/null
check "podman unpause ends its own pause only: the scope stays frozen" test "$(scope_freeze)" = 1
check "... and the daemon said nothing of an owner" test "$(said 'owner')" = 0

# --- systemctl freeze / thaw: the scope's own file ---------------------------------------
t0=$(date +%s.%N)
sysd freeze
sysd thaw
t1=$(date +%s.%N)
echo "systemctl freeze + thaw of $unit: $(calc "$t1 - $t0") s; the scope's cgroup.freeze $(scope_freeze)"
if eventually 5 'test "$(said "was thawed under the daemon while it held it frozen")" -ge 1'; then
  note "systemctl freeze + thaw ($(calc "$t1 - $t0") s) of the batch scope while the daemon held it frozen: said $(calc "$(date +%s.%N) - $t1") s after the thaw returned (the freezer reads back every 100 ms at most, the log's tick 1 s)"
else
  echo "FAIL: systemctl thaw thawed the batch scope while the LC was busy; the daemon did not say so within $((5 * SLACK)) s"
  FAILS=$((FAILS + 1))
fi
check "... and froze it again" eventually 5 'test "$(scope_freeze)" = 1 && frozen_now'

# owner_freeze N: systemctl freeze of the scope while the daemon has it
# thawed (the LC idle), then the LC busy: the daemon says, for the Nth
# time, that its owner holds it frozen
owner_freeze() {
  lc_idle
  sysd freeze
  lc_busy
  check "systemctl freeze while the daemon had it thawed is its owner's: said ($1)" eventually 10 "test \$(said 'is frozen by its owner') -ge $1"
}
owner_freeze 1
podman pause "$LC" >/dev/null
sleep 3 # the LC's line idle: the daemon thaws nothing
check "... the scope stays frozen while the LC is idle" test "$(scope_freeze)" = 1
lc_busy
sysd thaw
check "systemctl thaw gives the scope back to the daemon: said" eventually 10 'test "$(said "is thawed by its owner")" -ge 1'
check "... which freezes it while the LC is busy again" eventually 10 'frozen_now'
owner_freeze 2
grep -E "batch batch: .*(owner|thawed under)" "$WORK/daemon.log" | sed 's/^/  daemon| /'
stop_daemon
check "the daemon stopped cleanly" test "$?" = 0
check "at the stop, the scope its owner froze stays frozen" test "$(scope_freeze)" = 1
check "... as systemd says" test "$(systemctl show -P FreezerState "$unit")" = frozen
sysd thaw
check "... and systemctl thaws it" test "$(scope_freeze)" = 0
if [ "$FAILS" -gt 0 ]; then
  echo "the daemon's log (its last 40 lines):"
  tail -n 40 "$WORK/daemon.log" | sed 's/^/  daemon| /'
fi
note "scenario wall time in the guest: $(calc "$(date +%s.%N) - $started") s after the containers started"
finish
