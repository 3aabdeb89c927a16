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

# The image's cache key: the package list, the image script, the files baked
# into the image, and VM_IMAGE_VERSION.
vm_image_key() {
  {
    echo "version $VM_IMAGE_VERSION"
    cat "$VM_DIR/packages.list" "$VM_DIR/image.sh"
    for f in "$VM_DIR"/image/*; do
      echo "== ${f##*/}"
      cat "$f"
    done
  } | sha256sum | cut -c1-16
}

# The Debian packages of packages.list (comments and blanks dropped), one a line.
vm_packages() {
  sed -e 's/#.*//' -e 's/[[:space:]]//g' -e '/^$/d' "$VM_DIR/packages.list"
}

# Seconds since the epoch, with fractions (for figures printed to the user).
now_s() { date +%s.%N; }

# b - a, in seconds with one decimal.
elapsed_s() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
