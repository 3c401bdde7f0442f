#!/usr/bin/env bash
# The Debian 13 leg of the test command: builds xmod inside a Debian 13 (trixie)
# tree and runs there what differs between the releases (LibTorch 2.6 against
# 1.13, Open MPI 5 against 4.1, and the newer yaml-cpp, SQLite and Ceres): the
# worker's tests, the common, sweep, store and fit tests, the worker end-to-end
# tests and two sweeps end to end. deploy/test.sh (XMOD_TEST_SCOPE=release) lists
# them; everything else runs on the host only.
#
#   bash deploy/debian13.sh [ctest arguments]
#   bash deploy/debian13.sh --run 'COMMAND'   # in the tree as last built (e.g. a benchmark:
#       --run '/root/build/bin/worker_bench --threads 2'), without copying or testing
#   bash deploy/debian13.sh --prepare   # the tree and its packages only (deploy/test.sh
#       runs it in the background while the host build compiles)
#
# The tree is made once with debootstrap (minbase) under /var/cache/xmod/debian13/root
# (or $XMOD_DEBIAN13_DIR/root) and kept, with its build folder and ccache, for the
# next run of any checkout; XMOD_DEBIAN13_FRESH=1 makes it again. The sources are copied in
# (tracked and untracked files that git does not ignore, and data/brown when it
# is prepared). Needs root (debootstrap, chroot and bind mounts); anywhere else it
# says so and exits 0 without testing. The mirror is the one apt uses here, or
# $XMOD_DEBIAN_MIRROR.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
# The tree, its build folder and its ccache are kept machine-wide (as root) so
# that every checkout, and CI's fresh clone each run, starts from them warm.
if [ -n "${XMOD_DEBIAN13_DIR:-}" ]; then
  base=$XMOD_DEBIAN13_DIR
elif [ "$(id -u)" = 0 ]; then
  base=/var/cache/xmod/debian13
else
  base=$repo/build-debian13
fi
root="$base/root"

say() { echo "debian13: $*"; }
fail() {
  echo "debian13: FAILED: $1" >&2
  [ $# -gt 1 ] && echo "debian13: what to do: $2" >&2
  exit 1
}

if [ "$(id -u)" != 0 ]; then
  say "skipped: making and entering a Debian 13 tree needs root (debootstrap, chroot, mount); run the test command as root to include this leg"
  exit 0
fi

# One run at a time per tree (the sources are copied into it, then built there).
mkdir -p "$base"
exec 9>"$base/.lock"
if ! flock -n 9; then
  say "another run holds $base; waiting for it"
  flock 9
fi

mirror="${XMOD_DEBIAN_MIRROR:-}"
if [ -z "$mirror" ] && [ -f /etc/apt/sources.list.d/debian.sources ]; then
  mirror=$(awk '/^URIs:/ && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources)
fi
if [ -z "$mirror" ] && [ -f /etc/apt/sources.list ]; then
  mirror=$(awk '$1 == "deb" && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list)
fi
mirror="${mirror:-http://deb.debian.org/debian}"

mounted=()
cleanup() {
  local i
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -l "${mounted[$i]}" 2>/dev/null || true; done
}
trap cleanup EXIT

if [ "${XMOD_DEBIAN13_FRESH:-0}" = 1 ] || [ ! -f "$root/.xmod-tree-ready" ]; then
  command -v debootstrap >/dev/null 2>&1 || {
    say "installing debootstrap"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null 2>&1 ||
      { apt-get update -qq >/dev/null 2>&1 &&
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null 2>&1; } ||
      fail "apt-get could not install debootstrap" "check that apt can reach its mirror"
  }
  rm -rf "$root"
  mkdir -p "$base"
  say "making a Debian 13 tree from $mirror (about a minute; log: $base/debootstrap.log)"
  start=$SECONDS
  debootstrap --variant=minbase trixie "$root" "$mirror" >"$base/debootstrap.log" 2>&1 ||
    fail "debootstrap trixie from $mirror (last lines of $base/debootstrap.log below)
$(tail -n 15 "$base/debootstrap.log")" \
      "check that $mirror serves trixie, or set XMOD_DEBIAN_MIRROR to a mirror that does"
  touch "$root/.xmod-tree-ready"
  say "tree made in $((SECONDS - start)) s"
fi

# What a chroot needs that debootstrap does not give it: name resolution, this
# machine's extra CA certificates (a proxy's), and /proc, /dev, /sys.
cp -L /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
printf '127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n127.0.1.1 %s\n' \
  "$(hostname)" >"$root/etc/hosts"
if [ -d /usr/local/share/ca-certificates ]; then
  mkdir -p "$root/usr/local/share/ca-certificates"
  cp -r /usr/local/share/ca-certificates/. "$root/usr/local/share/ca-certificates/"
fi
for fs in proc sys dev dev/pts; do
  mkdir -p "$root/$fs"
  mount --bind "/$fs" "$root/$fs" || fail "mount --bind /$fs $root/$fs" "run as root on a machine that allows bind mounts"
  mounted+=("$root/$fs")
done
mkdir -p "$root/dev/shm"
mount -t tmpfs -o size=4g tmpfs "$root/dev/shm" && mounted+=("$root/dev/shm")

# Runs a command in the tree with a clean environment; extra VAR=value words
# before the command are added to it.
in_tree() {
  chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8 TERM=dumb "$@"
}

if [ "${1:-}" = "--run" ]; then
  shift
  [ -f "$root/.xmod-tree-ready" ] || fail "no Debian 13 tree at $root" "run bash deploy/debian13.sh once first"
  set +e
  in_tree bash -c "cd /xmod && $*"
  status=$?
  set -e
  exit "$status"
fi

# The sources, fresh each run (the build folder and ccache inside the tree stay).
say "copying the sources to /xmod in the tree"
rm -rf "$root/xmod"
mkdir -p "$root/xmod"
if git rev-parse --git-dir >/dev/null 2>&1; then
  git ls-files -z -co --exclude-standard | tar --null -T - -cf - | tar -xf - -C "$root/xmod"
else
  tar --exclude='./build*' --exclude='./runs' -cf - . | tar -xf - -C "$root/xmod"
fi
if [ -f data/brown/meta.json ]; then
  mkdir -p "$root/xmod/data"
  cp -r data/brown "$root/xmod/data/"
fi

# The machine's CA certificates in the tree (apt and npm inside it trust them too).
trust='if ! command -v update-ca-certificates >/dev/null 2>&1; then
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ca-certificates >/dev/null
  fi
  update-ca-certificates >/dev/null 2>&1 || true'

# --prepare: only the tree and its packages (network and disk, little CPU), so that
# deploy/test.sh can do it while the host build compiles; the leg proper then finds
# every package present.
if [ "${1:-}" = "--prepare" ]; then
  say "preparing the tree's packages (no build, no tests)"
  start=$SECONDS
  set +e
  in_tree XMOD_DEPS_SCOPE=release bash -c "set -e; $trust
    cd /xmod && exec bash deploy/install-deps.sh"
  status=$?
  set -e
  say "packages prepared in $((SECONDS - start)) s (exit $status)"
  exit "$status"
fi

say "installing, building and testing inside the tree (what differs between releases; deploy/test.sh says what)"
start=$SECONDS
set +e
in_tree XMOD_TEST_SCOPE=release XMOD_NO_BROWSER=1 XMOD_BUILD_DIR=/root/build \
  CCACHE_DIR=/root/.ccache NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt \
  bash -c "set -e; $trust
    cd /xmod && exec bash deploy/test.sh \"\$@\"" debian13 "$@"
status=$?
set -e
say "leg took $((SECONDS - start)) s inside the tree (exit $status)"
exit "$status"
