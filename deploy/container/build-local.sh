#!/bin/bash
# Builds the CPU image (deploy/container/Dockerfile) with podman where a Debian
# mirror is reachable but no container registry is: debootstrap makes a Debian 12
# (minbase) tree, `podman import` makes it the base image localhost/xmod-base:bookworm,
# and both stages of the Dockerfile start from it. As root (debootstrap).
#
#   bash deploy/container/build-local.sh      # -> xmod:latest
#
# Environment: XMOD_IMAGE (the tag, default xmod:latest), XMOD_BASE_DIR (where the
# tree is kept, default /var/cache/xmod/bookworm-base), XMOD_DEBIAN_MIRROR (default:
# the one apt uses here). Extra arguments go to podman build. RUN steps use
# --isolation=chroot, which needs no OCI runtime (crun cannot start containers
# inside another container or with cgroups in hybrid mode). docs/deploy-gpu.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
image="${XMOD_IMAGE:-xmod:latest}"
base_dir="${XMOD_BASE_DIR:-/var/cache/xmod/bookworm-base}"
base=localhost/xmod-base:bookworm
say() { echo "build-local: $*"; }
fail() {
  echo "build-local: FAILED: $1" >&2
  [ -n "${2:-}" ] && echo "build-local: what to do: $2" >&2
  exit 1
}

[ "$(id -u)" = 0 ] || fail "not root" "run as root: debootstrap makes the base tree"
for tool in podman debootstrap; do
  command -v "$tool" >/dev/null || fail "$tool is not installed" "apt-get install podman debootstrap"
done

mirror="${XMOD_DEBIAN_MIRROR:-}"
if [ -z "$mirror" ] && [ -f /etc/apt/sources.list.d/debian.sources ]; then
  mirror=$(awk '/^URIs:/ && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources)
fi
if [ -z "$mirror" ] && [ -f /etc/apt/sources.list ]; then
  mirror=$(awk '$1 == "deb" && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list)
fi
mirror="${mirror:-http://deb.debian.org/debian}"

if ! podman image exists "$base"; then
  if [ ! -f "$base_dir/.ready" ]; then
    rm -rf "$base_dir"
    mkdir -p "$base_dir"
    say "making a Debian 12 tree from $mirror (about a minute; log: $base_dir.log)"
    debootstrap --variant=minbase bookworm "$base_dir" "$mirror" >"$base_dir.log" 2>&1 ||
      fail "debootstrap bookworm from $mirror (last lines of $base_dir.log:)
$(tail -n 10 "$base_dir.log")" "check that $mirror serves bookworm, or set XMOD_DEBIAN_MIRROR"
    touch "$base_dir/.ready"
  fi
  say "importing the tree as $base"
  tar -C "$base_dir" --exclude=./.ready -cf - . | podman import - "$base" >/dev/null ||
    fail "podman import of $base_dir" "see podman's message above"
fi

log=build-image/podman-build.log
mkdir -p build-image
say "building $image (CPU variant; log: $log)"
start=$SECONDS
podman build --isolation=chroot -f deploy/container/Dockerfile \
  --build-arg BUILD_IMAGE="$base" --build-arg RUNTIME_IMAGE="$base" -t "$image" "$@" . >"$log" 2>&1 ||
  fail "podman build (last lines of $log:)
$(tail -n 20 "$log")" "the failing step is named in $log"
say "built $image in $((SECONDS - start)) s; its binaries report:"
grep -A2 -E '^xmod(-worker|-train)? [0-9]' "$log" | tail -n 9 || true
