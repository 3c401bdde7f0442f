#!/bin/bash
# Run in an image's build stage (deploy/container/Dockerfile, xmod.def): lays out
# what the runtime stage takes, so that it needs no package list of its own.
#   runtime-deps.sh OUT BINARY...
# OUT/rootfs/usr/local/bin/  the binaries
# OUT/rootfs/opt/torch/      a pip LibTorch's libraries (torch/lib and nvidia/), when
#                            the binaries load it from /opt/torch (the GPU variant)
# OUT/packages               the packages that own the shared libraries the binaries
#                            link directly (ldd + dpkg -S); apt brings the rest
# A linked library that no package owns and that is not under /opt/torch is an
# error: the runtime stage would not have it. The GPU driver's libraries (libcuda,
# libnvidia-*) are the host's, mounted at run time, and may be missing here.
set -euo pipefail
out=${1:?usage: runtime-deps.sh OUT BINARY...}
shift
fail() {
  echo "runtime-deps: FAILED: $1" >&2
  [ -n "${2:-}" ] && echo "runtime-deps: what to do: $2" >&2
  exit 1
}
mkdir -p "$out/rootfs/usr/local/bin"
packages=()
unowned=()
torch=0
for bin in "$@"; do
  [ -x "$bin" ] || fail "$bin is not an executable" "build it first (deploy/build-gpu.sh)"
  cp "$bin" "$out/rootfs/usr/local/bin/"
  listing="$(ldd "$bin" | grep -Ev '^\s*(libcuda\.so|libnvidia-)' || true)"
  ! grep -q 'not found' <<<"$listing" || fail "$bin: $(grep 'not found' <<<"$listing" | tr -s ' \t' ' ')" \
    "the build stage lacks a library it linked; see ldd $bin"
  for soname in $(readelf -d "$bin" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
    path="$(awk -v s="$soname" '$1 == s && $2 == "=>" {print $3}' <<<"$listing")"
    [ -n "$path" ] || continue
    case "$path" in /opt/torch/*) torch=1; continue ;; esac
    owner=""
    # dpkg records /lib or /usr/lib, and /usr/local/cuda is a link: try each spelling.
    for p in "$path" "$(realpath "$path")" "/usr${path#/usr}" "${path#/usr}"; do
      owner="$(dpkg -S "$p" 2>/dev/null | head -n 1 | cut -d: -f1)" && [ -n "$owner" ] && break
    done
    if [ -n "$owner" ]; then packages+=("$owner"); else unowned+=("$path"); fi
  done
done
[ "${#unowned[@]}" = 0 ] || fail "no package owns $(printf '%s\n' "${unowned[@]}" | sort -u | tr '\n' ' ')" \
  "install these libraries from packages in the build stage, or put them under /opt/torch"
printf '%s\n' "${packages[@]}" | sort -u >"$out/packages"
if [ "$torch" = 1 ]; then
  mkdir -p "$out/rootfs/opt/torch/torch"
  cp -a /opt/torch/torch/lib "$out/rootfs/opt/torch/torch/"
  [ -d /opt/torch/nvidia ] && cp -a /opt/torch/nvidia "$out/rootfs/opt/torch/"
fi
carried=""
[ "$torch" = 1 ] && carried=", and LibTorch's libraries from /opt/torch"
echo "runtime-deps: $# binaries; $(wc -l <"$out/packages") packages: $(tr '\n' ' ' <"$out/packages")$carried"
