#!/usr/bin/env bash
# The VM test bed's guest: a Debian root file system built from Debian
# packages (mmdebstrap, the profile's package list and kernel) as an ext4
# image, with the guest's own kernel and initrd beside it, cached between runs.
#
#   scripts/vm/image.sh                  build it unless the cache has it; print its directory
#   scripts/vm/image.sh --rebuild        build it again
#   scripts/vm/image.sh --guest trixie   the guest profile (scripts/vm/profiles/NAME.sh;
#                                        default bookworm, or $ELFEN_VM_GUEST)
#
# Cache: $ELFEN_VM_CACHE, else ${XDG_CACHE_HOME:-~/.cache}/elfen/vm, one
# directory per profile and key (a hash of the profile, its package list, this
# script and scripts/vm/image/*): root.img (ext4), vmlinuz, initrd.img,
# kernel-release, kernel-config.txt (the kernel's build options the test bed
# relies on), packages.txt (what was installed), mirrors.txt. The two most
# recently used keys of each profile are kept ($ELFEN_VM_KEEP). Needs root (mmdebstrap's root mode, files owned by
# root in the image). The mirrors are the host's apt sources' entries for the
# profile's suites, else deb.debian.org ($ELFEN_VM_MIRROR replaces the main
# archive's URL).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

rebuild=0 guest="${ELFEN_VM_GUEST:-bookworm}"
while [ $# -gt 0 ]; do
  case "$1" in
    --rebuild) rebuild=1; shift ;;
    --guest) guest="${2:?--guest needs a profile name}"; shift 2 ;;
    *) die "image.sh: unknown argument $1" ;;
  esac
done
vm_profile "$guest"

# "URI SUITE" for every entry of the host's apt sources (one-line and deb822
# formats).
host_mirrors() {
  local f
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -r "$f" ] || continue
    awk '$1 == "deb" {
      i = 2
      if ($i ~ /^\[/) { while ($i !~ /\]$/ && i < NF) i++; i++ }
      print $i, $(i + 1)
    }' "$f"
  done
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -r "$f" ] || continue
    awk 'BEGIN { RS = "" }
    {
      types = ""; uris = ""; suites = ""
      n = split($0, lines, "\n")
      for (k = 1; k <= n; k++) {
        l = lines[k]
        if (l ~ /^#/) continue
        if (l ~ /^Types:/)  { sub(/^Types:[ \t]*/, "", l);  types = l }
        if (l ~ /^URIs:/)   { sub(/^URIs:[ \t]*/, "", l);   uris = l }
        if (l ~ /^Suites:/) { sub(/^Suites:[ \t]*/, "", l); suites = l }
      }
      if (types !~ /(^| )deb( |$)/) next
      nu = split(uris, u, " "); ns = split(suites, s, " ")
      for (a = 1; a <= nu; a++) for (b = 1; b <= ns; b++) print u[a], s[b]
    }' "$f"
  done
}

# The sources lines mmdebstrap gets, one a line: the host's entries for the
# profile's suite (with -updates and -security) and its extra suites, else
# deb.debian.org's.
mirror_lines() {
  local lines s
  lines=$(host_mirrors | awk -v s="$VM_SUITE" -v x=" $VM_EXTRA_SUITES " \
    '$2 == s || $2 == s "-updates" || $2 == s "-security" || index(x, " " $2 " ")' | sort -u)
  if [ -z "$lines" ]; then
    lines=$(printf '%s\n' "http://deb.debian.org/debian $VM_SUITE" \
      "http://deb.debian.org/debian $VM_SUITE-updates" \
      "http://deb.debian.org/debian-security $VM_SUITE-security"
      for s in $VM_EXTRA_SUITES; do printf '%s\n' "http://deb.debian.org/debian $s"; done)
  fi
  if [ -n "${ELFEN_VM_MIRROR:-}" ]; then
    lines=$(printf '%s\n' "$lines" | awk -v m="$ELFEN_VM_MIRROR" '$2 !~ /-security$/ { $1 = m } { print }' | sort -u)
  fi
  printf '%s\n' "$lines" | awk '{ print "deb " $1 " " $2 " main" }'
}

# What the tests run in the guest need of it, checked in the built root before
# it becomes the image (a package that no longer ships them fails the build,
# not the tests): programs, and kernel modules (a .ko of the guest's kernel,
# or built in; overlay is podman's storage driver).
GUEST_PROGRAMS=(bash dd ip tc losetup modprobe)
# the containers scenario's engine, in a profile whose package list has it
if grep -qx 'podman' "$VM_DIR/$VM_PACKAGES_LIST"; then
  GUEST_PROGRAMS+=(podman crun conmon)
fi
GUEST_MODULES=(loop veth sch_prio bfq overlay)

# check_guest STAGE: says what is missing, fails if anything is.
check_guest() {
  local stage="$1" missing=() p m release dir
  for p in "${GUEST_PROGRAMS[@]}"; do
    local found="" d
    # a link counts as is: an absolute one points into the guest, not here
    for d in usr/bin usr/sbin bin sbin; do
      if [ -L "$stage/$d/$p" ] || [ -x "$stage/$d/$p" ]; then found=1; fi
    done
    [ -n "$found" ] || missing+=("program $p")
  done
  release=$(ls "$stage/lib/modules" | sort -V | tail -n1)
  dir="$stage/lib/modules/$release"
  for m in "${GUEST_MODULES[@]}"; do
    if [ -z "$(find "$dir/kernel" -name "$m.ko*" -print -quit 2>/dev/null)" ] &&
      ! grep -q "/$m\.ko" "$dir/modules.builtin" 2>/dev/null; then
      missing+=("kernel module $m")
    fi
  done
  [ ${#missing[@]} -eq 0 ] ||
    die "the guest lacks what its tests need: ${missing[*]} (scripts/vm/packages.list)"
  say "the guest has ${GUEST_PROGRAMS[*]} and the modules ${GUEST_MODULES[*]} (kernel $release)"
}

# Removes a directory tree in which a killed mmdebstrap may have left file
# systems mounted (the chroot's /proc, /sys, /dev/pts, /dev/shm): unmounts
# them, deepest first, and never crosses into one (rm --one-file-system).
remove_tree() {
  local d="$1" m
  [ -e "$d" ] || return 0
  while read -r m; do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
  done < <(awk -v d="$d" '$2 == d || index($2, d "/") == 1 { print $2 }' /proc/self/mounts | sort -r)
  rm -rf --one-file-system "$d"
}

# container_root STAGE: the root file system of the containers scenario's
# containers (no registry in the guest): a tar of a tree with Debian's merged
# /usr links and nothing else, at /opt/elfen/container-root.tar; the scenario
# imports it (podman import) and runs it with the guest's /usr mounted read
# only, so the container runs the guest's programs and libraries (elfen, sh)
# in cgroups and namespaces of its own.
container_root() {
  local stage="$1" tree d
  tree=$(mktemp -d)
  mkdir -p "$tree"/{usr,etc,dev,proc,sys,tmp,run,root}
  for d in bin sbin lib lib64; do ln -s "usr/$d" "$tree/$d"; done
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n' >"$tree/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' >"$tree/etc/group"
  chmod 1777 "$tree/tmp"
  mkdir -p "$stage/opt/elfen"
  tar -C "$tree" --numeric-owner --owner=0 --group=0 -cf "$stage/opt/elfen/container-root.tar" .
  rm -rf "$tree"
}

build() {
  local out="$1" stage="$1.stage"
  command -v mmdebstrap >/dev/null || die "mmdebstrap is missing: scripts/setup.sh --deps installs it (scripts/deps/vm.apt)"
  command -v mkfs.ext4 >/dev/null || die "mkfs.ext4 is missing: scripts/setup.sh --deps installs it (scripts/deps/vm.apt)"
  [ "$(id -u)" -eq 0 ] || die "building the guest image needs root (mmdebstrap, root-owned files); run as root or fill the cache $(vm_cache_dir) once as root"
  remove_tree "$out"
  remove_tree "$stage"
  # a build that fails or is stopped leaves no mounts behind
  trap 'remove_tree "'"$stage"'"' EXIT
  mkdir -p "$out"
  local -a mirrors
  mapfile -t mirrors < <(mirror_lines)
  printf '%s\n' "${mirrors[@]}" >"$out/mirrors.txt"
  local pkgs
  pkgs=$(vm_packages | paste -sd, -)
  say "building the $VM_PROFILE guest's root file system (Debian $VM_SUITE, minbase + $pkgs) from ${mirrors[0]#deb }"
  local t0
  t0=$(now_s)
  mmdebstrap --quiet --variant=minbase --include="$pkgs" \
    --aptopt='Acquire::Retries "3"' \
    --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    "$VM_SUITE" "$stage" "${mirrors[@]}" >&2
  say "mmdebstrap: $(elapsed_s "$t0" "$(now_s)") s, $(du -sm "$stage" | cut -f1) MB"

  # what the guest boots into (docs/vmtest.md)
  install -m 0644 "$VM_DIR/image/fstab" "$stage/etc/fstab"
  install -m 0644 "$VM_DIR/image/elfen-vmtest.service" "$stage/etc/systemd/system/"
  install -m 0644 "$VM_DIR/image/elfen-vmtest.target" "$stage/etc/systemd/system/"
  echo elfen-vm >"$stage/etc/hostname"
  printf '127.0.0.1 localhost\n127.0.1.1 elfen-vm\n' >"$stage/etc/hosts"
  mkdir -p "$stage/mnt/elfen"
  # Nothing that competes with the tests or waits for a network the guest has
  # not: no gettys, timers or time sync, no web server (nginx is there for a
  # test that starts its own).
  local u
  for u in serial-getty@ttyS0.service getty@tty1.service apt-daily.timer \
    apt-daily-upgrade.timer e2scrub_all.timer fstrim.timer dpkg-db-backup.timer \
    systemd-timesyncd.service nginx.service; do
    ln -sf /dev/null "$stage/etc/systemd/system/$u"
  done
  container_root "$stage"
  dpkg-query --admindir="$stage/var/lib/dpkg" -W -f '${Package} ${Version}\n' >"$out/packages.txt"
  check_guest "$stage"

  local kernel initrd
  kernel=$(ls "$stage"/boot/vmlinuz-* | sort -V | tail -n1)
  initrd=$(ls "$stage"/boot/initrd.img-* | sort -V | tail -n1)
  if [ ! -f "$kernel" ] || [ ! -f "$initrd" ]; then die "no kernel or initrd in the guest's /boot"; fi
  cp "$kernel" "$out/vmlinuz"
  cp "$initrd" "$out/initrd.img"
  basename "$kernel" | sed 's/^vmlinuz-//' >"$out/kernel-release"
  # the kernel's options the test bed's profiles rely on (BTF for CO-RE,
  # sched_ext, SMT scheduling, core scheduling), from its config file
  grep -E '^(# )?CONFIG_(DEBUG_INFO_BTF|SCHED_CLASS_EXT|SCHED_SMT|SCHED_CORE|CGROUP_SCHED|BPF_JIT)[ =]' \
    "$stage/boot/config-$(cat "$out/kernel-release")" >"$out/kernel-config.txt" 2>/dev/null ||
    echo "(no /boot/config-$(cat "$out/kernel-release") in the guest)" >"$out/kernel-config.txt"

  # ext4 with room for what the tests write (/tmp is on the root here)
  local used_mb
  used_mb=$(du -sm "$stage" | cut -f1)
  mkfs.ext4 -q -F -L elfen-root -d "$stage" "$out/root.img" "$((used_mb + 1024))M" >/dev/null
  remove_tree "$stage"
  trap - EXIT
  say "image ($VM_PROFILE): $out/root.img ($(du -sm "$out/root.img" | cut -f1) MB used of $((used_mb + 1024)) MB), kernel $(cat "$out/kernel-release"), built in $(elapsed_s "$t0" "$(now_s)") s"
}

# Keeps the $ELFEN_VM_KEEP (default 2) most recently used images of the
# profile (its directories: PREFIX then the key), so that checkouts with
# different package lists do not rebuild at each switch; removes the
# profile's others and any stage a stopped build left (of any profile: the
# cache's lock is held). A tree that cannot be
# removed is said and left: it never fails the run.
prune() {
  local cache="$1" current="$2" prefix="$3" keep="${ELFEN_VM_KEEP:-2}" d n=1
  for d in "$cache"/*.stage; do
    [ -d "$d" ] || continue
    say "removing a stopped build's stage ${d##*/}"
    remove_tree "$d" || say "warning: could not remove $d"
  done
  while read -r d; do
    [[ "${d##*/}" =~ ^$prefix[0-9a-f]{16}$ ]] || continue
    [ "$d" = "$current" ] && continue
    n=$((n + 1))
    [ "$n" -gt "$keep" ] || continue
    say "removing the least recently used image ${d##*/}"
    remove_tree "$d" || say "warning: could not remove $d"
  done < <(ls -1dt "$cache"/*/ 2>/dev/null | sed 's:/$::')
}

main() {
  local cache key dir prefix
  cache=$(vm_cache_dir)
  key=$(vm_image_key)
  prefix=$(vm_image_prefix)
  dir="$cache/$prefix$key"
  mkdir -p "$cache"
  exec 9>"$cache/.lock"
  flock 9
  if [ "$rebuild" -eq 1 ] || [ ! -f "$dir/complete" ]; then
    build "$dir"
    touch "$dir/complete"
  else
    say "$VM_PROFILE guest image from the cache: $dir (kernel $(cat "$dir/kernel-release"))"
  fi
  touch "$dir"
  prune "$cache" "$dir" "$prefix"
  printf '%s\n' "$dir"
}

main
