#!/usr/bin/env bash
# Boots the VM test bed's guest once and waits for it to power off.
#
#   scripts/vm/boot.sh IMAGE_DIR PAYLOAD_IMG OUT_DIR
#
# The guest: qemu-system-x86_64, 4 vCPUs as 1 socket x 2 cores x 2 SMT threads
# of a Skylake-Server model (a model whose CPUID leaves carry the SMT topology
# to the guest kernel), 2 GB, the guest's own kernel and initrd, the cached
# root image as a throw-away snapshot (/dev/vda), the payload image read-write
# (/dev/vdb), a serial console into OUT_DIR/serial.log, no network.
#
# Accelerator ($ELFEN_VM_ACCEL: auto, kvm, tcg; default auto): auto probes KVM
# with a bounded boot of the kernel alone (it must print its banner within
# $ELFEN_VM_KVM_PROBE_S, default 10 s; a nested KVM guest can hang after the
# BIOS without a word) and falls back to TCG, saying why. The choice is written
# to OUT_DIR/accel. Under TCG, $ELFEN_VM_TCG_THREAD (multi, the default, or
# single) says whether each vCPU gets a host thread or all take turns on one
# (the guest profile chooses; scripts/vm/profiles/trixie.sh says why).
#
# Bounds: the runner must say it is up within $ELFEN_VM_BOOT_TIMEOUT_S (default
# 300 s), and the guest must power off within $ELFEN_VM_TIMEOUT_S (default
# 2400 s) of the start; otherwise qemu is killed. Once up, a runner that
# prints no "@@elfen-vm" line for $ELFEN_VM_SILENCE_S (default 300 s; it prints
# one a minute while a test runs; kernel messages such as RCU stall reports do
# not count) is a guest that stopped: what its vCPUs were
# doing is saved (qemu's monitor: `info registers -a` into
# OUT_DIR/silence-regs.txt), the guest kernel is asked for its CPUs'
# backtraces (SysRq l and w on the emulated keyboard; what it prints within
# $ELFEN_VM_SYSRQ_WAIT_S, default 30 s, lands in the console log), and qemu is
# killed. Exit status: 0 the guest powered off,
# 2 boot timeout, 3 run timeout, 4 qemu failed, 5 the guest went silent.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

[ $# -eq 3 ] || die "usage: boot.sh IMAGE_DIR PAYLOAD_IMG OUT_DIR"
img="$1" payload="$2" out="$3"
mkdir -p "$out"
accel="${ELFEN_VM_ACCEL:-auto}"
probe_s="${ELFEN_VM_KVM_PROBE_S:-10}"
boot_timeout="${ELFEN_VM_BOOT_TIMEOUT_S:-300}"
run_timeout="${ELFEN_VM_TIMEOUT_S:-2400}"
silence_s="${ELFEN_VM_SILENCE_S:-300}"
sysrq_wait_s="${ELFEN_VM_SYSRQ_WAIT_S:-30}"
command -v qemu-system-x86_64 >/dev/null ||
  die "qemu-system-x86_64 is missing: scripts/setup.sh --deps installs it (scripts/deps/vm.apt)"

# shellcheck disable=SC2054 # qemu arguments with commas
CPU=(-cpu Skylake-Server -smp 4,sockets=1,cores=2,threads=2)
APPEND="console=ttyS0 panic=-1 systemd.unified_cgroup_hierarchy=1 sysrq_always_enabled=1"

qemu_pid=""
stop_qemu() {
  [ -n "$qemu_pid" ] || return 0
  kill "$qemu_pid" 2>/dev/null || true
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    kill -0 "$qemu_pid" 2>/dev/null || break
    sleep 0.5
  done
  kill -9 "$qemu_pid" 2>/dev/null || true
  wait "$qemu_pid" 2>/dev/null || true
  qemu_pid=""
}
trap stop_qemu EXIT

# Whether KVM boots this kernel here: its banner on the console within probe_s.
kvm_works() {
  if [ ! -r /dev/kvm ] || [ ! -w /dev/kvm ]; then
    why="/dev/kvm is not there or not usable by $(id -un)"
    return 1
  fi
  local log="$out/kvm-probe.log" t=0
  : >"$log"
  qemu-system-x86_64 -accel kvm "${CPU[@]}" -m 256 -nodefaults -display none -no-reboot \
    -kernel "$img/vmlinuz" -append "$APPEND root=/dev/null" \
    -serial "file:$log" >"$out/kvm-probe.err" 2>&1 &
  qemu_pid=$!
  while [ "$t" -lt "$((probe_s * 10))" ]; do
    if grep -q 'Linux version' "$log" 2>/dev/null; then
      stop_qemu
      return 0
    fi
    if ! kill -0 "$qemu_pid" 2>/dev/null; then
      wait "$qemu_pid" 2>/dev/null || true
      qemu_pid=""
      why="qemu -accel kvm failed: $(head -c 300 "$out/kvm-probe.err" | tr '\n' ' ')"
      return 1
    fi
    sleep 0.1
    t=$((t + 1))
  done
  stop_qemu
  why="a KVM guest printed nothing within ${probe_s} s (nested KVM hanging after the BIOS)"
  return 1
}

case "$accel" in
  auto)
    if kvm_works; then
      accel=kvm
      say "accelerator: KVM (the probe boot printed the kernel banner)"
    else
      accel=tcg
      say "accelerator: TCG (emulation, about ten times slower than the host): $why"
    fi
    ;;
  kvm | tcg) say "accelerator: ${accel^^} (ELFEN_VM_ACCEL)" ;;
  *) die "ELFEN_VM_ACCEL must be auto, kvm or tcg, not $accel" ;;
esac
echo "$accel" >"$out/accel"

# hmp COMMAND...: each command sent to qemu's human monitor (the socket of
# the guest's run), what it answered on stdout. Needs python3; says so
# without it.
monitor="$out/monitor.sock"
hmp() {
  command -v python3 >/dev/null || { echo "(python3 is missing: the monitor was not asked)"; return 0; }
  python3 - "$monitor" "$@" <<'PY'
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(20)
try:
    s.connect(sys.argv[1])
except OSError as e:
    print(f"(the monitor did not answer: {e})")
    sys.exit(0)
def until_prompt():
    buf = b""
    while not buf.endswith(b"(qemu) "):
        chunk = s.recv(65536)
        if not chunk:
            break
        buf += chunk
    return buf.decode(errors="replace")
try:
    until_prompt()
    for cmd in sys.argv[2:]:
        s.sendall(cmd.encode() + b"\n")
        print(f"== {cmd}")
        # the monitor echoes the command with line-editing codes first
        answer = until_prompt().replace("\r", "").rsplit("(qemu) ", 1)[0]
        print(answer.split("\n", 1)[-1])
except OSError as e:
    print(f"(the monitor stopped answering: {e})")
PY
}

serial="$out/serial.log"
: >"$serial"
rm -f "$monitor"
t_launch=$(now_s)
qemu_accel="$accel"
if [ "$accel" = tcg ]; then
  tcg_thread="${ELFEN_VM_TCG_THREAD:-multi}"
  case "$tcg_thread" in
    multi | single) qemu_accel="tcg,thread=$tcg_thread" ;;
    *) die "ELFEN_VM_TCG_THREAD must be multi or single, not $tcg_thread" ;;
  esac
  say "TCG: $tcg_thread-threaded (one host thread $([ "$tcg_thread" = multi ] && echo per vCPU || echo for every vCPU, in turns))"
fi
qemu-system-x86_64 -accel "$qemu_accel" "${CPU[@]}" -m 2048 \
  -nodefaults -display none -no-reboot -nic none \
  -kernel "$img/vmlinuz" -initrd "$img/initrd.img" \
  -append "$APPEND root=/dev/vda rw elfen.accel=$accel systemd.unit=elfen-vmtest.target systemd.show_status=error" \
  -drive "file=$img/root.img,format=raw,if=virtio,snapshot=on" \
  -drive "file=$payload,format=raw,if=virtio" \
  -device virtio-rng-pci \
  -monitor "unix:$monitor,server=on,wait=off" \
  -serial "file:$serial" >"$out/qemu.err" 2>&1 &
qemu_pid=$!
say "guest started (qemu pid $qemu_pid, log $serial); boot bound ${boot_timeout} s, run bound ${run_timeout} s"

# Prints the runner's "@@elfen-vm" lines as they come; watches the bounds.
seen=0 booted="" status=0 t_heard=$(now_s)
while :; do
  n=$(wc -l <"$serial")
  if [ "$n" -gt "$seen" ]; then
    if sed -n "$((seen + 1)),${n}p" "$serial" | grep -q '@@elfen-vm '; then
      t_heard=$(now_s)
    fi
    sed -n "$((seen + 1)),${n}p" "$serial" | tr -d '\r' | sed -n 's/^.*@@elfen-vm /vm| /p'
    if [ -z "$booted" ] && sed -n "$((seen + 1)),${n}p" "$serial" | grep -q '@@elfen-vm up:'; then
      booted=$(now_s)
      elapsed_s "$t_launch" "$booted" >"$out/boot-seconds"
    fi
    seen=$n
  fi
  if ! kill -0 "$qemu_pid" 2>/dev/null; then
    wait "$qemu_pid" 2>/dev/null || status=$?
    qemu_pid=""
    if [ "$status" -ne 0 ]; then
      say "qemu failed (exit $status): $(head -c 500 "$out/qemu.err")"
      status=4
    fi
    break
  fi
  t=$(elapsed_s "$t_launch" "$(now_s)")
  if [ -z "$booted" ] && awk -v t="$t" -v b="$boot_timeout" 'BEGIN { exit !(t > b) }'; then
    say "boot timeout: the guest's runner did not start within ${boot_timeout} s; the console's last lines:"
    tail -n 30 "$serial" | tr -d '\r' | sed 's/^/  | /' >&2
    stop_qemu
    status=2
    break
  fi
  quiet=$(elapsed_s "$t_heard" "$(now_s)")
  if [ -n "$booted" ] && awk -v t="$quiet" -v b="$silence_s" 'BEGIN { exit !(t > b) }'; then
    say "the guest went silent: no runner line for ${silence_s} s, $t s after the start; the console's last lines:"
    tail -n 8 "$serial" | tr -d '\r' | sed 's/^/  | /' >&2
    last_mark=$(grep -n '@@elfen-vm ' "$serial" | tail -n1 | cut -d: -f1)
    stalls=$(tail -n +"${last_mark:-1}" "$serial" | grep -c -E 'rcu: INFO|soft lockup|hard LOCKUP|hung_task|csd: ' || true)
    [ "$stalls" -eq 0 ] || say "since the runner's last line the guest kernel reported $stalls stall or lock-up line(s) (RCU, soft lockup, hung task, CSD): see $serial"
    size=$(stat -c %s "$serial")
    hmp "info status" "info cpus" "info registers -a" >"$out/silence-regs.txt" 2>&1
    say "its vCPUs (qemu's monitor): $(grep -o 'thread_id=[0-9]*' "$out/silence-regs.txt" | wc -l) listed; RIP of each: $(grep -o 'RIP=[0-9a-f]*' "$out/silence-regs.txt" | cut -d= -f2 | paste -sd' ' -) (registers in $out/silence-regs.txt)"
    hmp "sendkey alt-sysrq-l" >/dev/null 2>&1
    sleep "$((sysrq_wait_s / 3))"
    hmp "sendkey alt-sysrq-w" >/dev/null 2>&1
    sleep "$((sysrq_wait_s - sysrq_wait_s / 3))"
    after=$(tail -c +"$((size + 1))" "$serial" | tr -d '\r' | wc -l)
    if [ "$after" -gt 0 ]; then
      say "the guest kernel answered SysRq l/w with $after lines (backtraces in $serial)"
    else
      say "the guest kernel printed nothing after SysRq l/w within ${sysrq_wait_s} s (kernel and console stopped, or the keyboard not seen)"
    fi
    stop_qemu
    status=5
    break
  fi
  if awk -v t="$t" -v b="$run_timeout" 'BEGIN { exit !(t > b) }'; then
    say "run timeout: the guest did not power off within ${run_timeout} s; the console's last lines:"
    tail -n 30 "$serial" | tr -d '\r' | sed 's/^/  | /' >&2
    stop_qemu
    status=3
    break
  fi
  sleep 1
done
elapsed_s "$t_launch" "$(now_s)" >"$out/run-seconds"
exit "$status"
