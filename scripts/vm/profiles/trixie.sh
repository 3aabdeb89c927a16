# shellcheck shell=bash
# The sched_ext guest (scripts/vmtest.sh --guest trixie): Debian 13 with the
# trixie-backports cloud kernel 7.3, which has CONFIG_SCHED_CLASS_EXT=y, BTF
# and CONFIG_SCHED_SMT=y: where elfen's sched_ext scheduler (crates/scx) is
# loaded and measured. Sourced by scripts/vm/lib.sh (vm_profile);
# docs/vmtest.md.
# shellcheck disable=SC2034 # read by the scripts that source lib.sh

VM_SUITE=trixie
# the kernel comes from backports; everything else from trixie itself
VM_EXTRA_SUITES="trixie-backports"
VM_PACKAGES_LIST=packages-trixie.list
# The kernel, named with its version: a newer backports kernel is a change of
# this line (and a new image key), not a silent upgrade. "NAME/SUITE" takes a
# package from that suite: the kernel pre-depends on a linux-base newer than
# trixie's.
VM_KERNEL_PACKAGES="linux-image-7.3.4+deb13-cloud-amd64 linux-base/trixie-backports"
# everything the bookworm guest runs, and the sched_ext tests
VM_TESTS_LISTS="tests.list tests-trixie.list"
# the kernel's build options this guest is for (checked in the image's
# kernel-config.txt before each boot: a kernel without them fails the run
# rather than letting the sched_ext tests skip)
VM_KERNEL_CONFIG="CONFIG_SCHED_CLASS_EXT=y CONFIG_DEBUG_INFO_BTF=y CONFIG_SCHED_SMT=y"
# Under TCG all vCPUs take turns on one host thread. With a thread per vCPU
# (qemu 7.2's default) this kernel oopsed at an int3 right after rewriting
# its own text (the static branches sched_ext flips when a scheduler is
# enabled or disabled): in two of the last three runs, once in the very
# kthread that had just disabled the scheduler (update_rq_clock+0x3a, whose
# bytes already read back as the restored NOP): most likely a translation
# of the patched code made by another vCPU's thread while it was being
# patched. One thread leaves the emulator no such race (no oops in the
# runs since); the tests measure side by side either way.
VM_TCG_THREAD=single
