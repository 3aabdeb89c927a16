# shellcheck shell=bash
# The VM test bed's default guest (scripts/vmtest.sh --guest bookworm): Debian 12
# with its 6.1 cloud kernel, the kernel Debian 12 hosts run. Sourced by
# scripts/vm/lib.sh (vm_profile); docs/vmtest.md.
# shellcheck disable=SC2034 # read by the scripts that source lib.sh

# the Debian suite mmdebstrap builds from, and suites added to it (besides its
# -updates and -security)
VM_SUITE=bookworm
VM_EXTRA_SUITES=""
# the guest's packages (scripts/vm/, one a line) and its kernel's packages
# (space-separated; NAME/SUITE takes one from that suite)
VM_PACKAGES_LIST=packages.list
VM_KERNEL_PACKAGES=linux-image-cloud-amd64
# the test binaries the guest runs (scripts/vm/, "package kind target [args]")
VM_TESTS_LISTS="tests.list"
