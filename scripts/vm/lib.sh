# shellcheck shell=bash
# Shared by the VM test bed's host scripts (scripts/vmtest.sh, scripts/vm/*.sh):
# sourced, not run.

VM_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck disable=SC2034 # used by the scripts that source this
REPO_DIR="$(cd "$VM_DIR/../.." && pwd)"

# Bumped when the image's construction changes in a way the hashed files below
# do not show (the cache key includes it).
VM_IMAGE_VERSION=1

say() { printf 'vmtest: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

# Where built images live between runs (outside the clone, shared by clones).
vm_cache_dir() {
  printf '%s\n' "${ELFEN_VM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/elfen/vm}"
}

# The guest profiles: scripts/vm/profiles/NAME.sh, each setting VM_SUITE,
# VM_EXTRA_SUITES, VM_PACKAGES_LIST, VM_KERNEL_PACKAGES and VM_TESTS_LISTS,
# and optionally VM_KERNEL_CONFIG (the kernel's CONFIG_X=y lines the guest
# must have) and VM_TCG_THREAD (multi, the default, or single: how TCG runs
# the vCPUs). bookworm is the default.
vm_profiles() {
  local f
  for f in "$VM_DIR"/profiles/*.sh; do
    f="${f##*/}"
    printf '%s\n' "${f%.sh}"
  done
}

# vm_profile NAME: loads a profile (VM_PROFILE is its name); dies naming the
# profiles there are when it does not exist.
vm_profile() {
  local name="$1"
  [[ "$name" =~ ^[a-z0-9-]+$ ]] && [ -f "$VM_DIR/profiles/$name.sh" ] ||
    die "no guest profile '$name' (profiles: $(vm_profiles | paste -sd' ' -); scripts/vm/profiles/)"
  VM_SUITE="" VM_EXTRA_SUITES="" VM_PACKAGES_LIST="" VM_KERNEL_PACKAGES="" VM_TESTS_LISTS="" VM_KERNEL_CONFIG="" VM_TCG_THREAD=""
  # shellcheck source=/dev/null
  . "$VM_DIR/profiles/$name.sh"
  [ -n "$VM_SUITE" ] && [ -f "$VM_DIR/$VM_PACKAGES_LIST" ] && [ -n "$VM_KERNEL_PACKAGES" ] && [ -n "$VM_TESTS_LISTS" ] ||
    die "scripts/vm/profiles/$name.sh must set VM_SUITE, VM_PACKAGES_LIST (an existing file), VM_KERNEL_PACKAGES and VM_TESTS_LISTS"
  VM_PROFILE="$name"
}

# A profile's image directories in the cache are named PREFIX + key: the
# default profile's have no prefix (as before there were profiles), the
# others' are "NAME-", so building one profile never removes another's.
vm_image_prefix() {
  if [ "$VM_PROFILE" = bookworm ]; then echo ""; else echo "$VM_PROFILE-"; fi
}

# The image's cache key: the profile, its package list, the image script, the
# files baked into the image, and VM_IMAGE_VERSION.
vm_image_key() {
  {
    echo "version $VM_IMAGE_VERSION"
    cat "$VM_DIR/profiles/$VM_PROFILE.sh" "$VM_DIR/$VM_PACKAGES_LIST" "$VM_DIR/image.sh"
    for f in "$VM_DIR"/image/*; do
      echo "== ${f##*/}"
      cat "$f"
    done
  } | sha256sum | cut -c1-16
}

# The Debian packages of the profile's list (comments and blanks dropped) and
# its kernel's, one a line (apt's NAME/SUITE where one is asked from a suite).
vm_packages() {
  {
    sed -e 's/#.*//' -e 's/[[:space:]]//g' -e '/^$/d' "$VM_DIR/$VM_PACKAGES_LIST"
    printf '%s\n' $VM_KERNEL_PACKAGES
  } | awk '!seen[$0]++'
}

# Seconds since the epoch, with fractions (for figures printed to the user).
now_s() { date +%s.%N; }

# b - a, in seconds with one decimal.
elapsed_s() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
