#!/usr/bin/env bash
# Makes crates/scx/src/bpf/vmlinux.h: the kernel types elfen's sched_ext
# scheduler (crates/scx/src/bpf/lanes.bpf.c) is compiled against, dumped as C
# by bpftool from a sched_ext kernel's BTF. The header is checked in, so the
# build needs neither this script nor a sched_ext kernel; run it when the
# scheduler moves to a newer kernel (and say so in the commit).
#
#   scripts/scx-vmlinux.sh              from the kernel of the VM test bed's trixie
#                                       guest (scripts/vm/image.sh --guest trixie
#                                       builds the image if the cache has none)
#   scripts/scx-vmlinux.sh --btf FILE   from a BTF file (/sys/kernel/btf/vmlinux of a
#                                       sched_ext machine) or an uncompressed vmlinux
#   scripts/scx-vmlinux.sh --check      make it again and compare with the checked-in one
#
# Needs bpftool (scripts/deps/bpf.apt) and, for a compressed kernel image, the
# decompressor of its format (zstd, xz, gzip; scripts/deps/scx.apt).
set -euo pipefail
cd "$(dirname "$0")/.."
out=crates/scx/src/bpf/vmlinux.h
say() { printf 'scx-vmlinux: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

src="" check=0
while [ $# -gt 0 ]; do
  case "$1" in
    --btf) src="${2:?--btf needs a file}"; shift 2 ;;
    --check) check=1; shift ;;
    -h | --help) sed -n '2,/^set -e/p' "$0" | sed -e '/^set -e/d' -e 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done
command -v bpftool >/dev/null || die "bpftool is missing: scripts/setup.sh --deps bpf installs it"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# vmlinuz (a bzImage) -> the ELF vmlinux inside it, whose .BTF section is the
# kernel's BTF: the payload starts at a magic of its compressor (the first
# offset that decompresses to an ELF file, as the kernel's
# scripts/extract-vmlinux does).
extract() {
  local img="$1" to="$2" magic tool off
  for m in '\x28\xb5\x2f\xfd zstd' '\xfd\x37\x7a\x58\x5a\x00 xz' '\x1f\x8b\x08 gzip'; do
    magic=${m% *} tool=${m#* }
    for off in $(LC_ALL=C grep -obUaP "$magic" "$img" | cut -d: -f1 | head -n 8); do
      command -v "$tool" >/dev/null ||
        die "the kernel image is $tool-compressed and $tool is missing: scripts/setup.sh --deps scx installs it"
      tail -c +"$((off + 1))" "$img" | "$tool" -dc >"$to" 2>/dev/null || true
      if [ -s "$to" ] && [ "$(head -c 4 "$to" | od -A n -t x1 | tr -d ' \n')" = 7f454c46 ]; then
        say "extracted vmlinux ($tool payload at byte $off)"
        return 0
      fi
    done
  done
  die "no vmlinux ELF found inside $img"
}

if [ -z "$src" ]; then
  image_dir=$(scripts/vm/image.sh --guest trixie)
  release=$(cat "$image_dir/kernel-release")
  extract "$image_dir/vmlinuz" "$tmp/vmlinux"
  src="$tmp/vmlinux"
  from="the BTF of Linux $release (the VM test bed's trixie guest kernel, scripts/vm/profiles/trixie.sh), extracted from its vmlinuz"
else
  [ -r "$src" ] || die "cannot read $src"
  release="(from $src)"
  from="the BTF in $src"
fi

bpftool btf dump file "$src" format c >"$tmp/body.h" || die "bpftool could not dump the BTF of $src"
grep -q 'struct sched_ext_ops {' "$tmp/body.h" || die "$src has no struct sched_ext_ops: not a sched_ext kernel"
{
  echo "/* SPDX-License-Identifier: GPL-2.0-only */"
  echo "/*"
  echo " * The kernel types elfen's sched_ext scheduler is compiled against:"
  echo " * $from."
  echo " * Made by scripts/scx-vmlinux.sh with: bpftool btf dump file vmlinux format c"
  echo " * ($(bpftool version | head -n1)). Do not edit; make it again with the script."
  echo " */"
  cat "$tmp/body.h"
} >"$tmp/vmlinux.h"

if [ "$check" -eq 1 ]; then
  if cmp -s "$tmp/vmlinux.h" "$out"; then
    say "$out is what $release gives"
    exit 0
  fi
  say "$out differs from what $release gives:"
  diff -u "$out" "$tmp/vmlinux.h" | head -n 40 >&2 || true
  exit 1
fi
mv "$tmp/vmlinux.h" "$out"
say "wrote $out ($(wc -c <"$out") bytes, $(grep -c '^struct [a-z_0-9]* {' "$out") structs) from $release"
