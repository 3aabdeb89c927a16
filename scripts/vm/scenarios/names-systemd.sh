#!/bin/bash
# The daemon as the Debian package installs it (the hardened unit:
# capability allow-list, ProtectSystem=strict, Type=notify with a watchdog,
# Delegate=yes), the LC and the batch named the way systemd names them: the LC
# by its unit (unit = "elfen-lc.service"), the batch by its slice (slice =
# "batch.slice", mode idle). Checks: systemd sees the daemon ready (its status
# line), batch.slice yields (cpu.idle 1), the LC line follows the LC, elfen
# status shows the daemon's LC, groups and owners, the LC is followed across
# a restart of its unit (a new cgroup), logs are one event per line with
# levels, a stop gives everything back; a configuration the daemon refuses
# stops the unit with status 78, not restarted. Then a Kubernetes pod laid out
# as the kubelet's systemd driver lays it out (slices and a cri-containerd
# scope): --check resolves it by UID, by namespace/name (the kubelet's log
# directory) and by QoS class, and names a pod that does not exist.
# shellcheck disable=SC2016 # eventually's expressions are evaluated at each poll
. "$(dirname "$0")/../guest/lib.sh"
set -u

ELFEN=/usr/bin/elfen
PORT=9464
LC_UNIT=elfen-lc.service
LC_GROUP=system.slice/$LC_UNIT
WINDOW_S=$((2 * SLACK))
POD_UID=1b2c3d4e-0000-4000-8000-000000000001
POD_SLICE=kubepods-burstable-pod${POD_UID//-/_}.slice
BE_UID=1b2c3d4e-0000-4000-8000-000000000002
BE_SLICE=kubepods-besteffort-pod${BE_UID//-/_}.slice
CID=0123456789abcdef

[ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ] || skip cgroup-v2:cpu "the unified cgroup v2 hierarchy at /sys/fs/cgroup, with the cpu controller"
[ -d /run/systemd/system ] || skip systemd "systemd as PID 1"

cleanup() {
  systemctl stop elfen-daemon.service nightly.service "$LC_UNIT" batch.slice \
    "cri-containerd-$CID.scope" "cri-containerd-${CID}2.scope" kubepods.slice 2>/dev/null
  systemctl reset-failed elfen-daemon.service nightly.service 2>/dev/null
  rm -f /etc/systemd/system/{elfen-daemon.service,$LC_UNIT,batch.slice} "$ELFEN"
  rm -rf /etc/elfen /var/log/pods
  systemctl daemon-reload
}
trap cleanup EXIT

# --- install as the package does ----------------------------------------------
install -m 0755 "$ELFEN_BIN" "$ELFEN"
install -m 0644 "$ELFEN_REPO/packaging/systemd/elfen-daemon.service" /etc/systemd/system/
install -D -m 0644 /dev/stdin /etc/elfen/daemon.toml <<EOF
[lc]
unit = "$LC_UNIT"

[[batch]]
name = "batch"
mode = "idle"
slice = "batch.slice"

[metrics]
listen = "127.0.0.1:$PORT"
EOF
cat >/etc/systemd/system/$LC_UNIT <<EOF
[Unit]
Description=a synthetic LC service (busy 300 ms, idle 200 ms)
[Service]
ExecStart=$ELFEN daemon lc-helper --name=lcsvc --cpu 0 --busy-us 300000 --idle-min-us 200000 --idle-max-us 200000
EOF
cat >/etc/systemd/system/batch.slice <<EOF
[Unit]
Description=batch work that borrows the LC's idle lanes
[Slice]
CPUWeight=100
EOF
systemctl daemon-reload
systemctl start batch.slice
systemctl start "$LC_UNIT"
systemd-run --quiet --slice=batch.slice --unit=nightly "$ELFEN" daemon spin-helper
check "the LC service runs" systemctl is-active -q "$LC_UNIT"
check "the batch job runs in batch.slice" eventually 10 'test -n "$(cg_read batch.slice/nightly.service cgroup.procs)"'

plan=$("$ELFEN" daemon --config /etc/elfen/daemon.toml --check 2>&1)
rc=$?
echo "$plan" | sed 's/^/  check| /'
check "--check accepts the unit and the slice (exit 0)" test "$rc" = 0
check "--check finds the LC's unit by systemctl" grep -q "LC unit $LC_UNIT is /sys/fs/cgroup/$LC_GROUP" <<<"$plan"
check "--check says batch.slice is systemd's" grep -q "batch.slice is systemd's" <<<"$plan"
idle_before=$(cg_read batch.slice cpu.idle)

# --- run under systemd ------------------------------------------------------
systemctl start elfen-daemon.service
check "the daemon unit is active (READY=1 came)" systemctl is-active -q elfen-daemon.service
status=$(systemctl show -p StatusText --value elfen-daemon.service)
echo "status text: $status"
check "its status line says what it protects" grep -q "protecting unit $LC_UNIT" <<<"$status"
check "a watchdog is set" test "$(systemctl show -p WatchdogUSec --value elfen-daemon.service)" != 0
journal() { journalctl -u elfen-daemon.service -o cat --no-pager; }
check "the daemon runs" eventually 10 'journal | grep -q "running (SIGTERM"'
check "its log lines carry a level, one event per line" eventually 5 'journal | grep -q "^ INFO elfen daemon: running\|^INFO elfen daemon: running"'
check "batch.slice yields as a whole (cpu.idle 1)" eventually 5 'test "$(cg_read batch.slice cpu.idle)" = 1'
check "the metrics endpoint answers" eventually 10 'test -n "$(metric $PORT elfen_controller_alive)"'
st=$("$ELFEN" status 2>&1)
echo "$st" | sed 's/^/  status| /'
check "elfen status shows the LC as named" grep -q "LC unit $LC_UNIT" <<<"$st"
check "elfen status shows the group it is watched in" grep -q "watched in /sys/fs/cgroup/$LC_GROUP" <<<"$st"
check "elfen status shows the batch group's owner" grep -q "owned by systemd" <<<"$st"

busy() { metric $PORT 'elfen_lc_busy_seconds_total{lane="0",cpu="0"}'; }
window() { # prints "LC line busy seconds, LC run seconds" over WINDOW_S
  local l0 c0 l1 c1
  l0=$(busy); c0=$(cg_usage_s "$LC_GROUP")
  sleep "$WINDOW_S"
  l1=$(busy); c1=$(cg_usage_s "$LC_GROUP")
  echo "$(calc "$l1 - $l0") $(calc "$c1 - $c0")"
}
read -r line lc <<<"$(window)"
echo "window ${WINDOW_S} s: LC ran ${lc} s, its line said busy ${line} s"
check "the LC ran" holds "$lc > 0.1 * $WINDOW_S"
check "the LC line followed the LC named by its unit (>= half its run time)" holds "$line >= 0.5 * $lc"
note "unit-named LC: line busy ${line} s vs LC run ${lc} s in ${WINDOW_S} s"

# the unit restarts: a new cgroup of the same name, found again
systemctl restart "$LC_UNIT"
check "the LC unit restarted" systemctl is-active -q "$LC_UNIT"
sleep "$SLACK"
read -r line2 lc2 <<<"$(window)"
echo "after the restart: LC ran ${lc2} s, its line said busy ${line2} s"
check "after a restart of its unit the LC line follows it again" holds "$line2 >= 0.5 * $lc2 && $lc2 > 0"
note "after the LC unit's restart: line busy ${line2} s vs LC run ${lc2} s"

systemctl stop elfen-daemon.service
journal | tail -n 12 | sed 's/^/  daemon| /'
check "the daemon stopped cleanly (exit 0)" test "$(systemctl show -p ExecMainStatus --value elfen-daemon.service)" = 0
check "batch.slice cpu.idle restored ($idle_before)" test "$(cg_read batch.slice cpu.idle)" = "$idle_before"
check "the page is removed" test ! -e /dev/shm/elfen
check "the batch job still runs" systemctl is-active -q nightly.service

# a refused configuration: status 78, not restarted
cp /etc/elfen/daemon.toml /etc/elfen/daemon.toml.good
printf '[lc]\nunit = "no-such.service"\n[[batch]]\nname = "b"\nmode = "idle"\nslice = "batch.slice"\n' >/etc/elfen/daemon.toml
systemctl start elfen-daemon.service
sleep "$SLACK"
check "a refused configuration: the unit failed with status 78" test "$(systemctl show -p ExecMainStatus --value elfen-daemon.service)" = 78
check "... and is not restarted" test "$(systemctl show -p NRestarts --value elfen-daemon.service)" = 0
check "... the journal names the unit" eventually 5 'journal | grep -q "no-such.service"'
systemctl reset-failed elfen-daemon.service
mv /etc/elfen/daemon.toml.good /etc/elfen/daemon.toml

# --- a Kubernetes pod as the kubelet's systemd driver makes it ----------------
systemd-run --quiet --scope --slice="$POD_SLICE" --unit="cri-containerd-$CID.scope" sleep 600 &
systemd-run --quiet --scope --slice="$BE_SLICE" --unit="cri-containerd-${CID}2.scope" sleep 600 &
mkdir -p "/var/log/pods/default_web_$POD_UID"
check "the pod's scope exists" eventually 10 "test -d /sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/$POD_SLICE/cri-containerd-$CID.scope"
check "the BestEffort pod's scope exists" eventually 10 "test -d /sys/fs/cgroup/kubepods.slice/kubepods-besteffort.slice/$BE_SLICE/cri-containerd-${CID}2.scope"
pod_check() { # LC-KEY LC-VALUE: --check's output with the LC so named, the BestEffort class as batch
  printf 'page = "/dev/shm/elfen-pods"\n[lc]\n%s = "%s"\n[[batch]]\nname = "be"\nmode = "idle"\nidle_method = "sched_idle"\nqos = "besteffort"\n' "$1" "$2" >/tmp/pods.toml
  "$ELFEN" daemon --config /tmp/pods.toml --check 2>&1
}
out=$(pod_check pod_uid "$POD_UID"); rc=$?
echo "$out" | sed 's/^/  pod_uid| /'
check "pod_uid: accepted" test "$rc" = 0
check "pod_uid: resolved to the pod's slice" grep -q "$POD_SLICE" <<<"$out"
check "batch qos besteffort: the kubelet's group" grep -q "kubepods-besteffort.slice" <<<"$out"
out=$(pod_check pod "default/web"); rc=$?
echo "$out" | sed 's/^/  pod| /'
check "pod by namespace/name (the kubelet's log directory): resolved" test "$rc" = 0 -a -n "$(grep "$POD_SLICE" <<<"$out")"
out=$(pod_check qos "burstable"); rc=$?
check "qos burstable: resolved" test "$rc" = 0 -a -n "$(grep "kubepods-burstable.slice" <<<"$out")"
out=$(pod_check pod "default/nosuch"); rc=$?
echo "$out" | sed 's/^/  nosuch| /'
check "a pod that does not exist: refused (78), named" test "$rc" = 78 -a -n "$(grep "default/nosuch" <<<"$out")"
rm -f /tmp/pods.toml
note "the hardened unit ran under systemd $(systemctl --version | head -1 | awk '{print $2}'): READY, watchdog, exit 78 not restarted"
finish
