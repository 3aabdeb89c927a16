#!/usr/bin/env bash
# The VM test bed: the daemon's live tests and an end-to-end protection run on
# a Debian guest with systemd as PID 1, the unified cgroup v2 hierarchy only,
# and 4 vCPUs as 2 cores x 2 SMT threads (emulated: it proves the topology,
# pairing and multi-pair code paths, not SMT interference). See docs/vmtest.md.
#
#   scripts/vmtest.sh                      build (if needed), boot, run, print results
#   scripts/vmtest.sh --select 'daemon'    only tests whose "suite test" matches the regex
#   scripts/vmtest.sh --rebuild-image      build the guest image again
#   scripts/vmtest.sh --profile debug      the scenarios run target/debug/elfen
#                                          (what `cargo test` built; scripts/test.sh)
#   scripts/vmtest.sh --guest trixie       the guest profile (scripts/vm/profiles/NAME.sh):
#                                          bookworm (default; Debian 12, kernel 6.1) or
#                                          trixie (Debian 13, backports kernel 7.3 with sched_ext)
#
# On the host it builds the `elfen` binary the scenarios run (release, unless
# --profile debug) and the workspace's test binaries (cargo: nothing to do when
# scripts/test.sh has built them), takes the guest image from the cache
# (scripts/vm/image.sh builds it the first time), puts the test binaries of
# the profile's tests lists (scripts/vm/tests.list, ...), the scenarios and the
# guest script on a payload disk, boots the guest (scripts/vm/boot.sh: KVM if
# it works, else TCG), reads the results back from the disk and prints them.
# Exit status 1 on any failed test, a skip of something the guest offers
# (judged in the guest by elfen-test-log, as on the host), an unexpected skip
# (scripts/vm/expected-skips), a boot or run timeout, or missing results.
#
# A guest whose console stays quiet past ELFEN_VM_SILENCE_S (default 300 s) is
# killed (what its vCPUs did is saved) and restarted to resume after its last
# result, at most ELFEN_VM_RESUMES (default 2) times; each silence is said.
# The test in flight then fails if it runs elfen's real-time threads (the
# daemon's live tests, the scenarios) or its BPF source; any other runs
# again, counted among the tests that ran twice.
#
# Environment: ELFEN_VM_CACHE (image cache), ELFEN_VM_MIRROR (Debian mirror),
# ELFEN_VM_ACCEL (auto|kvm|tcg), ELFEN_VM_BOOT_TIMEOUT_S, ELFEN_VM_TIMEOUT_S,
# ELFEN_VM_TEST_TIMEOUT_S (one test), ELFEN_VM_SLACK (the guest's time stretch),
# ELFEN_VM_OUT (where the run's logs go; default target/vmtest), ELFEN_VM_GUEST
# (the profile when --guest is not given).
set -euo pipefail
. "$(dirname "$0")/vm/lib.sh"
cd "$REPO_DIR"

select_re="" rebuild="" profile=release guest="${ELFEN_VM_GUEST:-bookworm}"
while [ $# -gt 0 ]; do
  case "$1" in
    --profile)
      profile="${2:?--profile needs debug or release}"; shift 2
      case "$profile" in debug | release) ;; *) die "--profile: debug or release, not $profile" ;; esac
      ;;
    --select) select_re="${2:?--select needs a regex}"; shift 2 ;;
    --guest) guest="${2:?--guest needs a profile name}"; shift 2 ;;
    --rebuild-image) rebuild=--rebuild; shift ;;
    -h | --help) sed -n '2,/^set -e/p' "$0" | sed -e '/^set -e/d' -e 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done

vm_profile "$guest"
# how TCG runs the vCPUs: the profile's choice unless the caller's
export ELFEN_VM_TCG_THREAD="${ELFEN_VM_TCG_THREAD:-${VM_TCG_THREAD:-multi}}"
t_start=$(now_s)
command -v cargo >/dev/null || export PATH="$HOME/.cargo/bin:$PATH"
out="${ELFEN_VM_OUT:-$REPO_DIR/target/vmtest}"
# the last run's directory is replaced; any other existing directory is refused
if [ -e "$out" ] && [ ! -e "$out/.elfen-vmtest" ] && [ -n "$(ls -A "$out" 2>/dev/null)" ]; then
  die "$out exists and is not a VM test bed's output directory; choose another ELFEN_VM_OUT"
fi
rm -rf "$out"
mkdir -p "$out"
touch "$out/.elfen-vmtest"

# --- the host's build (a no-op where it is built already) -------------------
say "building the $profile elfen and the test binaries (cargo; nothing to do if built)"
if [ "$profile" = release ]; then cargo build --locked --release -p elfen; fi
cargo test --locked --workspace --no-run --message-format=json 2>"$out/cargo-test.err" >"$out/cargo-test.json" ||
  { cat "$out/cargo-test.err" >&2; die "cargo test --no-run failed"; }
target_dir=$(cargo metadata --locked --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
elfen_bin="$target_dir/$profile/elfen"
[ -x "$elfen_bin" ] || die "no $elfen_bin after the build"

# "package kind target executable" of every built test harness and binary
artifacts() {
  grep '"executable":"' "$out/cargo-test.json" | sed -E \
    -e 's/.*"package_id":"([^"]*)".*"target":\{"kind":\["([a-z-]+)"\][^}]*"name":"([^"]+)".*"profile":\{[^}]*"test":(true|false)\}.*"executable":"([^"]+)".*/\1 \2 \3 \4 \5/' |
    awk '{ id = $1; sub(/.*#/, "", id)
           if (id ~ /@/) sub(/@.*/, "", id)
           else { p = $1; sub(/#.*/, "", p); n = split(p, c, "/"); id = c[n] }
           kind = ($4 == "true") ? $2 : "bin-exe"
           print id, kind, $3, $5 }'
}
artifacts >"$out/artifacts.txt"

# --- the payload disk --------------------------------------------------------
pay="$out/payload"
mkdir -p "$pay/tree" "$pay/guest" "$pay/scenarios"
cp "$VM_DIR"/guest/* "$pay/guest/"
cp "$VM_DIR"/scenarios/*.sh "$pay/scenarios/" 2>/dev/null || true
: >"$pay/links.tsv"
# A host path in the payload: repository files under tree/repo, the target
# directory under tree/target when it is outside the repository. The guest links
# the host's directories to them, so every path compiled into a test binary
# (CARGO_BIN_EXE_*, CARGO_MANIFEST_DIR) holds there too.
printf '%s\t%s\n' "$REPO_DIR" tree/repo >>"$pay/links.tsv"
case "$target_dir/" in
  "$REPO_DIR"/*) ;;
  *) printf '%s\t%s\n' "$target_dir" tree/target >>"$pay/links.tsv" ;;
esac
ship() {
  local src="$1" rel
  case "$src" in
    "$REPO_DIR"/*) rel="tree/repo/${src#"$REPO_DIR"/}" ;;
    "$target_dir"/*) rel="tree/target/${src#"$target_dir"/}" ;;
    *) die "cannot place $src in the guest" ;;
  esac
  mkdir -p "$pay/$(dirname "$rel")"
  cp -a "$src" "$pay/$rel"
}
# the repository's files tests read at run time (configs, unit files, the
# DaemonSet's manifest, vectors, the docs the metrics table is checked
# against), and the crates' directories
# (CARGO_MANIFEST_DIR/../../configs must resolve)
for d in configs deploy docs packaging testdata; do
  [ -d "$d" ] && ship "$REPO_DIR/$d"
done
for d in crates/*/; do
  mkdir -p "$pay/tree/repo/$d"
done
ship "$elfen_bin"
# the judge of each test's skips in the guest (as scripts/test.sh's last step
# judges the host's): built by cargo test for elfen-cmd's integration tests
test_log_bin=$(awk '$1 == "elfen-cmd" && $2 == "bin-exe" && $3 == "elfen-test-log" { print $4 }' "$out/artifacts.txt" | tail -n1)
[ -n "$test_log_bin" ] || die "no built elfen-test-log (elfen-cmd) in $out/artifacts.txt"
ship "$test_log_bin"
: >"$pay/tests.tsv"
while read -r pkg kind name filter; do
  case "$pkg" in '' | '#'*) continue ;; esac
  exe=$(awk -v p="$pkg" -v k="$kind" -v n="$name" '$1 == p && $2 == k && $3 == n { print $4 }' "$out/artifacts.txt" | tail -n1)
  [ -n "$exe" ] || die "scripts/vm/{$VM_TESTS_LISTS}: no built $kind target $name of $pkg (see $out/artifacts.txt)"
  ship "$exe"
  # the package's binaries (CARGO_BIN_EXE_* of its integration tests)
  awk -v p="$pkg" '$1 == p && $2 == "bin-exe" { print $4 }' "$out/artifacts.txt" | while read -r b; do ship "$b"; done
  printf '%s\t%s\t%s\n' "$pkg/$name" "$exe" "$filter" >>"$pay/tests.tsv"
done < <(for l in $VM_TESTS_LISTS; do sed 's/#.*//' "$VM_DIR/$l"; done)
{
  echo "ELFEN_BIN=$elfen_bin"
  echo "ELFEN_TEST_LOG_BIN=$test_log_bin"
  echo "ELFEN_REPO=$REPO_DIR"
  echo "ELFEN_VM_TEST_TIMEOUT_S=${ELFEN_VM_TEST_TIMEOUT_S:-600}"
  echo "ELFEN_VM_SELECT='${select_re//\'/}'"
  echo "RUST_BACKTRACE=1"
  [ -z "${ELFEN_VM_SLACK:-}" ] || echo "ELFEN_VM_SLACK=$ELFEN_VM_SLACK"
} >"$pay/env"

image_dir=$(scripts/vm/image.sh --guest "$VM_PROFILE" $rebuild)
# what the guest is, from its image: the kernel and the build options the
# profiles rely on (the guest's run adds what it sees at run time: facts.txt)
{
  echo "profile $VM_PROFILE (Debian $VM_SUITE${VM_EXTRA_SUITES:+ + $VM_EXTRA_SUITES})"
  echo "kernel_packages $VM_KERNEL_PACKAGES"
  echo "kernel $(cat "$image_dir/kernel-release")"
  cat "$image_dir/kernel-config.txt" 2>/dev/null
} >"$out/guest.txt"
say "guest: $(head -n3 "$out/guest.txt" | cut -d' ' -f2- | paste -sd';' -); $(grep -E 'CONFIG_(SCHED_CLASS_EXT|SCHED_SMT|DEBUG_INFO_BTF)' "$out/guest.txt" | paste -sd' ' -)"
for c in $VM_KERNEL_CONFIG; do
  grep -qx "$c" "$image_dir/kernel-config.txt" 2>/dev/null ||
    die "the $VM_PROFILE guest's kernel $(cat "$image_dir/kernel-release") lacks $c (scripts/vm/profiles/$VM_PROFILE.sh: VM_KERNEL_CONFIG; $image_dir/kernel-config.txt)"
done

payload_mb=$(($(du -sm "$pay" | cut -f1) + 512))
mkfs.ext4 -q -F -L elfen-payload -d "$pay" "$out/payload.img" "${payload_mb}M" >"$out/mkfs.err" 2>&1 ||
  { cat "$out/mkfs.err" >&2; die "mkfs.ext4 of the payload failed"; }
t_ready=$(now_s)
say "payload: $(du -sm "$pay" | cut -f1) MB ($(wc -l <"$pay/tests.tsv") test binaries, $(ls "$pay/scenarios" | wc -l) scenarios); host side ready after $(elapsed_s "$t_start" "$t_ready") s"
rm -rf "$pay"

# --- boot, run, power off ----------------------------------------------------
# A guest that goes silent (boot.sh exit 5: its console quiet past the
# silence bound) is restarted on the same payload, up to
# $ELFEN_VM_RESUMES (default 2) times: the runner goes on after its last
# recorded result; the test in flight fails if it runs elfen's real-time
# threads or BPF source, any other runs again (a second silence during the
# same test fails it). Each silence is said here and in the results.
#
# A guest kernel that panicked before the runner started (nothing of the
# project's had run: under TCG, e.g. an int3 oops in the timekeeping code as
# the kernel rewrites its own text while it switches clocksources, a hazard
# of the multi-threaded emulation) boots once more, its payload checked
# first, said here and in the results; a second such panic fails the run.
resumes="${ELFEN_VM_RESUMES:-2}"
boots=1 early_panics=0
: >"$out/silences.txt"
: >"$out/panics.txt"
while :; do
  boot_status=0
  scripts/vm/boot.sh "$image_dir" "$out/payload.img" "$out" || boot_status=$?
  if [ "$boot_status" -eq 0 ] && [ "$early_panics" -eq 0 ] &&
    ! grep -aq '@@elfen-vm up:' "$out/serial.log" && grep -aq 'Kernel panic' "$out/serial.log"; then
    mv "$out/serial.log" "$out/serial-boot$boots.log"
    printf 'boot %s: the guest kernel panicked before the runner started: %s (console: serial-boot%s.log)\n' \
      "$boots" "$(grep -a -m1 -E 'Oops|BUG|Kernel panic' "$out/serial-boot$boots.log" | tr -d '\r' | sed 's/^\[ *[0-9.]*\] //')" "$boots" >>"$out/panics.txt"
    say "$(tail -n1 "$out/panics.txt"); booting it once more"
    e2fsck -fy "$out/payload.img" >"$out/e2fsck.log" 2>&1 || true
    early_panics=1
    boots=$((boots + 1))
    ELFEN_VM_ACCEL=$(cat "$out/accel")
    export ELFEN_VM_ACCEL
    continue
  fi
  [ "$boot_status" -eq 5 ] || break
  # a guest that finished its tests while the silence was looked into
  # powered off too late: its results are complete, nothing to resume
  e2fsck -fy "$out/payload.img" >"$out/e2fsck.log" 2>&1 || true
  if debugfs -R "stat /results/complete" "$out/payload.img" 2>/dev/null | grep -q '^Inode:'; then
    say "the guest's results are complete (it finished while it was looked into)"
    boot_status=0
  fi
  mv "$out/serial.log" "$out/serial-boot$boots.log"
  mv "$out/silence-regs.txt" "$out/silence-regs-boot$boots.txt" 2>/dev/null || true
  last=$(tr -d '\r' <"$out/serial-boot$boots.log" | sed -n 's/^.*@@elfen-vm //p' | tail -n1)
  printf 'boot %s went silent; its last line: %s (console: serial-boot%s.log, vCPU registers: silence-regs-boot%s.txt)\n' \
    "$boots" "${last:-none}" "$boots" "$boots" >>"$out/silences.txt"
  [ "$boot_status" -eq 5 ] && [ "$boots" -le "$resumes" ] || break
  say "restarting the guest on the same payload to resume after its last result (restart $boots of at most $resumes)"
  boots=$((boots + 1))
  ELFEN_VM_ACCEL=$(cat "$out/accel")
  export ELFEN_VM_ACCEL
done
# a guest kernel that panicked once the runner ran: said with the last thing
# the runner said and the oops (no second boot: the tests may have caused it)
if [ "$boot_status" -eq 0 ] && grep -aq '@@elfen-vm up:' "$out/serial.log" && grep -aq 'Kernel panic' "$out/serial.log"; then
  printf 'boot %s: the guest kernel panicked after "%s": %s (console: serial.log)\n' "$boots" \
    "$(tr -d '\r' <"$out/serial.log" | sed -n 's/^.*@@elfen-vm //p' | tail -n1)" \
    "$(grep -a -m1 -E 'Oops|BUG' "$out/serial.log" | tr -d '\r' | sed 's/^\[ *[0-9.]*\] //'); $(grep -a -m1 -E '^\[ *[0-9.]*\] RIP: ' "$out/serial.log" | tr -d '\r' | sed 's/^\[ *[0-9.]*\] //')" >>"$out/panics.txt"
  say "$(tail -n1 "$out/panics.txt")"
fi
t_done=$(now_s)

# --- results -----------------------------------------------------------------
rm -rf "$out/results"
# a guest that was killed left its journal unreplayed: e2fsck replays it
[ "$boot_status" -eq 0 ] || e2fsck -fy "$out/payload.img" >"$out/e2fsck.log" 2>&1 || true
debugfs -R "rdump /results $out" "$out/payload.img" >/dev/null 2>"$out/debugfs.err" || true
rm -f "$out/payload.img"
accel=$(cat "$out/accel" 2>/dev/null || echo "?")
boot_s=$(cat "$out/boot-seconds" 2>/dev/null || echo "?")
exec scripts/vm/results.sh "$out" "$boot_status" "$accel" "$boot_s" \
  "$(elapsed_s "$t_ready" "$t_done")" "$(elapsed_s "$t_start" "$t_done")"
