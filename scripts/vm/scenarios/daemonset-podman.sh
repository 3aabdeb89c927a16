#!/bin/bash
# The DaemonSet's shape on one node: the daemon itself runs in a podman
# container set up as deploy/kubernetes/elfen-daemonset.yaml sets up its pod
# (the host's PID and IPC namespaces, a cgroup namespace of its own as a
# pod on cgroup v2 has, the capabilities the manifest adds and no others, no
# privilege escalation, the runtime's seccomp filter off, a read-only root,
# the memory limit, and the manifest's volumes at its mount paths: the host's
# /sys/fs/cgroup below /host, /dev/shm, /run/elfen, /var/log/pods and
# /var/lib/kubelet read only, the configuration read only at /etc/elfen),
# with the ConfigMap's daemon.toml (its file locations and metrics as they
# are; the LC and batch selectors, which name Kubernetes QoS classes, replaced
# by the podman containers of guest/podman.sh). It protects a containerized
# LC from a batch container on the same host.
#
# Checks: --check in the pod finds both containers by id through the
# mounted tree; the daemon runs, the batch scope gets its knobs, the LC line
# follows the LC container's run time, `elfen status` answers in the pod and
# the metrics port (the liveness probe) on the node; a pod killed (SIGKILL)
# leaves the batch protected and its state file in /run/elfen, and the next
# pod repairs it; with podman's container list mounted read only below /host
# the daemon selects the containers by name, in guard mode (the guard's
# real-time threads: SYS_NICE); a stop with the manifest's grace period exits
# 0 and gives everything back.
#
# Not exercised here (say so in docs/operations.md): the image build
# (deploy/container/Containerfile needs a registry: the pod runs the guest's
# elfen through its /usr, mounted read only), a kubelet (QoS classes, pod
# names from /var/log/pods, the CPU manager), the pod network and a cluster.
# shellcheck disable=SC2016 # eventually's expressions are evaluated at each poll
. "$(dirname "$0")/../guest/lib.sh"
. "$(dirname "$0")/../guest/podman.sh"
set -u

MANIFEST=${ELFEN_REPO:-/nonexistent}/deploy/kubernetes/elfen-daemonset.yaml
POD=elfen-daemon
WINDOW_S=$((2 * SLACK))
MADE=()

podman_needs
[ -f "$MANIFEST" ] || { echo "FAIL: the DaemonSet's manifest $MANIFEST is missing (the payload ships deploy/)"; exit 1; }

cleanup() {
  podman rm -f -t 0 "$POD" >/dev/null 2>&1
  podman_cleanup
  rm -rf /dev/shm/elfen /run/elfen/daemon-state.json
  local d
  for d in "${MADE[@]}"; do rmdir "$d" 2>/dev/null; done
}
trap cleanup EXIT

# --- what the manifest says --------------------------------------------------------
# the ConfigMap's daemon.toml, its selectors dropped (top-level keys and the
# [metrics] section kept as written)
sed -n '/^  daemon.toml: |$/,/^---$/p' "$MANIFEST" | sed '1d;$d' | sed 's/^    //' |
  awk '/^\[/ { sec = $0 } sec == "" || sec == "[metrics]" { print }' >"$WORK/base.toml"
echo "the ConfigMap's daemon.toml without its selectors:"
sed 's/^/  configmap| /' "$WORK/base.toml"
tomlval() { sed -n "s/^$1 = \"\(.*\)\"$/\1/p" "$WORK/base.toml"; }
listen=$(tomlval listen)
PORT=${listen##*:}
check "the ConfigMap sets the host's tree below /host" test "$(tomlval cgroup_root)" = /host/sys/fs/cgroup
check "the ConfigMap's state file is in /run/elfen" test "$(dirname "$(tomlval state_file)")" = /run/elfen
check "the ConfigMap's metrics listen on a port" test -n "$PORT"
caps=$(sed -n 's/^ *add: \[\(.*\)\].*/\1/p' "$MANIFEST" | tr -d '" ')
memory=$(awk '/limits:/ { l = 1 } l && /memory:/ { print $2; exit }' "$MANIFEST")
grace=$(sed -n 's/^ *terminationGracePeriodSeconds: *//p' "$MANIFEST")
echo "the manifest: capabilities $caps, memory limit $memory, grace period ${grace}s"
check "the manifest adds capabilities" test -n "$caps"
for want in 'hostPID: true' 'hostIPC: true' 'runAsUser: 0' 'privileged: false' \
  'allowPrivilegeEscalation: false' 'readOnlyRootFilesystem: true' 'drop: \["ALL"\]' \
  'type: Unconfined'; do
  check "the manifest says $want (the pod below is run so)" grep -q "^ *$want" "$MANIFEST"
done
# the volumes: host path → mount path (read only), as the manifest's
# volumeMounts and volumes say; checked against it
VOLUMES=(
  "/sys/fs/cgroup:/host/sys/fs/cgroup"
  "/dev/shm:/dev/shm"
  "/run/elfen:/run/elfen"
  "/var/log/pods:/host/var/log/pods:ro"
  "/var/lib/kubelet:/host/var/lib/kubelet:ro"
)
for v in "${VOLUMES[@]}"; do
  IFS=: read -r host at _ <<<"$v"
  check "the manifest mounts $at" grep -q "^ *mountPath: $at$" "$MANIFEST"
  check "the manifest's volume for $at is the host's $host" grep -q "^ *path: $host$" "$MANIFEST"
  if [ ! -e "$host" ]; then
    mkdir -p "$host" && MADE+=("$host") # the manifest's DirectoryOrCreate
  fi
done

# pod_run NAME ARGS...: the daemon's pod as the manifest has it (podman
# run's own flags first; the network is the node's, so that the metrics port
# is reachable as a Service would reach it)
pod_flags() {
  local v flags=(--pull never --network host --pid host --ipc host --cgroupns private
    --user 0 --cap-drop ALL --security-opt no-new-privileges --security-opt seccomp=unconfined
    --read-only --memory "${memory/Mi/m}" -v /usr:/usr:ro -v "$WORK/etc:/etc/elfen:ro")
  local IFS=,
  for c in $caps; do flags+=(--cap-add "$c"); done
  unset IFS
  for v in "${VOLUMES[@]}"; do flags+=(-v "$v"); done
  printf '%s\n' "${flags[@]}"
}
mapfile -t POD_FLAGS < <(pod_flags)
echo "the pod: podman run ${POD_FLAGS[*]}"

# config LC_SELECTOR BATCH_SELECTOR MODE: the pod's daemon.toml
config() {
  mkdir -p "$WORK/etc"
  {
    cat "$WORK/base.toml"
    printf '\n[lc]\ncontainer = "%s"\n\n[[batch]]\nname = "batch"\nmode = "%s"\ncontainer = "%s"\n' "$1" "$3" "$2"
  } >"$WORK/etc/daemon.toml"
}
pod_logs() { podman logs "$POD" 2>&1; }

# --- the containers ------------------------------------------------------------------
start_containers
cpus_before=$(cg_read "$batch_scope" cpuset.cpus.effective)
idle_before=$(cg_read "$batch_scope" cpu.idle)
echo "before: $batch_scope cpuset.cpus.effective='$cpus_before' cpu.idle='$idle_before'"

# --- the pod, the manifest's mounts only: both containers by id -------------------------
started=$(date +%s.%N)
config "$lc_id" "$batch_id" idle
plan=$(podman run --rm "${POD_FLAGS[@]}" "$IMAGE" "$ELFEN" daemon --config /etc/elfen/daemon.toml --check 2>&1)
rc=$?
echo "$plan" | sed 's/^/  check| /'
check "--check in the pod passes" test "$rc" = 0
check "--check in the pod finds the LC container by id" grep -q "libpod-$lc_id.scope" <<<"$plan"
check "--check in the pod finds the batch container by id" grep -q "libpod-$batch_id.scope" <<<"$plan"

check "the daemon's pod starts" eval 'podman run -d --name "$POD" "${POD_FLAGS[@]}" "$IMAGE" "$ELFEN" daemon --config /etc/elfen/daemon.toml >/dev/null'
check "the daemon in the pod runs" eventually 15 'pod_logs | grep -q "running (SIGTERM"'
check "the daemon in the pod found the LC container" grep -q "libpod-$lc_id.scope" <<<"$(pod_logs)"
check "the batch scope is cpu.idle" eventually 5 'test "$(cg_read "$batch_scope" cpu.idle)" = 1'
check "the batch scope is confined to the batch lanes 1,3" eventually 5 'test "$(cg_read "$batch_scope" cpuset.cpus)" = "1,3"'
check "the metrics port answers on the node (the liveness probe)" eventually 10 'test -n "$(metric "$PORT" elfen_controller_alive)"'
window idle " (the daemon in a pod)"
st=$(podman exec "$POD" "$ELFEN" status 2>&1)
rc=$?
echo "$st" | head -n 12 | sed 's/^/  status| /'
check "elfen status in the pod answers" test "$rc" = 0
check "the page is the host's /dev/shm/elfen" test -e /dev/shm/elfen

# a pod killed: the batch stays protected, the state file stays for the next
podman kill -s KILL "$POD" >/dev/null
check "a pod killed: it is gone" eventually 10 'test "$(podman inspect -f "{{.State.Running}}" "$POD")" = false'
check "... the batch scope stays cpu.idle" test "$(cg_read "$batch_scope" cpu.idle)" = 1
check "... its state file stays in /run/elfen" test -s /run/elfen/daemon-state.json
pod_logs | tail -n 5 | sed 's/^/  pod| /'
podman rm -f "$POD" >/dev/null

# --- the next pod: names through podman's list, guard mode ---------------------------------
# podman's container list, read only below /host, as a node with podman
# would add to the manifest's volumes (the manifest names pods through the
# kubelet's files instead)
list=/var/lib/containers/storage/overlay-containers
config "$LC" "$BATCH" guard
POD_FLAGS+=(-v "$list:/host$list:ro")
check "the next pod starts (names, guard)" eval 'podman run -d --name "$POD" "${POD_FLAGS[@]}" "$IMAGE" "$ELFEN" daemon --config /etc/elfen/daemon.toml >/dev/null'
check "the daemon in the next pod runs" eventually 15 'pod_logs | grep -q "running (SIGTERM"'
check "... and repaired what the killed pod left" grep -q "repaired what an earlier daemon left" <<<"$(pod_logs)"
check "... and found the LC container by name" grep -q "libpod-$lc_id.scope" <<<"$(pod_logs)"
check "guard: the batch scope is cpu.idle" eventually 5 'test "$(cg_read "$batch_scope" cpu.idle)" = 1'
check "the metrics port answers (guard)" eventually 10 'test -n "$(metric "$PORT" elfen_controller_alive)"'
window guard " (the daemon in a pod)"

# the stop, with the manifest's grace period
t0=$(date +%s.%N)
podman stop -t "${grace:-30}" "$POD" >/dev/null
note "podman stop of the daemon's pod: $(calc "$(date +%s.%N) - $t0") s (grace period ${grace:-30} s)"
code=$(podman inspect -f '{{.State.ExitCode}}' "$POD")
echo "the daemon's pod exited with status $code; its log's last lines:"
pod_logs | tail -n 25 | sed 's/^/  pod| /'
check "the daemon in the pod stopped cleanly (its exit status: $code)" test "$code" = 0
check "the batch scope's CPUs restored ($cpus_before in effect)" test "$(cg_read "$batch_scope" cpuset.cpus.effective)" = "$cpus_before"
check "the batch scope's cpu.idle restored ($idle_before)" test "$(cg_read "$batch_scope" cpu.idle)" = "$idle_before"
check "the page is removed" test ! -e /dev/shm/elfen
check "the containers still run" test "$(podman inspect -f '{{.State.Running}}' "$LC" "$BATCH" | sort -u)" = true
note "scenario wall time in the guest: $(calc "$(date +%s.%N) - $started") s from the first pod"
finish
