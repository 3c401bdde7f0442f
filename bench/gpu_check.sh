#!/bin/bash
# The GPU check (docs/gpu-check.md): builds xmod-train and gpu_bench against the
# CUDA LibTorch of this machine's PyTorch, with as few other dependencies as the
# worker has, and runs the measurements in one go (NCCL all-reduce, dense
# d = 1024 bf16 MFU, X-MoD vs dense step time against FLOPs, a 200-step bf16
# curve against the CPU's fp32 one).
#
#   bash bench/gpu_check.sh                     # on the GPU machine
#   bash bench/gpu_check.sh --prepare-deps DIR  # on a Debian 12 machine with a package
#       mirror: download and unpack what a GPU machine without one needs (Abseil,
#       fmt, xxHash, nlohmann-json, CLI11, Open MPI, CMake, Ninja) into DIR; copy DIR there
#       and point XMOD_GPU_DEPS at it
#   bash bench/gpu_check.sh --cpu               # the same steps on this machine's
#       LibTorch with small shapes (the test suite runs this)
#
# Environment: XMOD_TORCH_PREFIX (LibTorch's CMake prefix; default: asked of
# python3's torch), XMOD_GPU_DEPS (unpacked packages, default bench/gpu-deps when
# present), XMOD_GPU_BUILD (build folder, default build-gpu), XMOD_GPU_BUILD_TYPE
# (CMake build type, default Release; the test suite builds RelWithDebInfo beside
# its main build so that ccache reuses that build's objects), XMOD_PEAK_TFLOPS
# (the GPU's dense bf16 peak; default from nvidia-smi's name for H100/H200/A100).
# Every failing step says what failed and what to do.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo"
say() { echo "gpu_check: $*"; }
fail() {
  echo "gpu_check: FAILED: $1" >&2
  [ -n "${2:-}" ] && echo "gpu_check: what to do: $2" >&2
  exit 1
}

# -- Packages for a machine without a registry ---------------------------------
if [ "${1:-}" = "--prepare-deps" ]; then
  dir="${2:?usage: gpu_check.sh --prepare-deps DIR}"
  command -v apt-get >/dev/null || fail "apt-get is not here" "run --prepare-deps on a Debian 12 machine"
  mkdir -p "$dir/debs"
  wanted="libabsl-dev nlohmann-json3-dev libcli11-dev libfmt-dev libxxhash-dev libopenmpi-dev openmpi-bin cmake ninja-build"
  # Their dependencies as apt resolves them on an empty system, less what must be
  # the GPU machine's own: the essential and required base (glibc above all: a
  # second libc on the library path breaks every process), and the compilers and
  # C/C++ runtime headers (the machine's compiler is used with its own).
  mapfile -t resolved < <(apt-get -s -o Dir::State::status=/dev/null install --no-install-recommends \
      $wanted 2>/dev/null | awk '/^Inst /{print $2}')
  [ "${#resolved[@]}" -gt 0 ] || fail "apt could not resolve $wanted" "run apt-get update first"
  skip='^(libc6|libc6-dev|libc-bin|libc-dev-bin|linux-libc-dev|libstdc\+\+.*|libgcc.*|gcc.*|cpp.*|g\+\+.*|gfortran.*|libgfortran-.*-dev|binutils.*|libbinutils|libctf.*|libgprofng.*|libasan.*|liblsan.*|libtsan.*|libubsan.*|libhwasan.*|libitm.*|libcc1.*|libisl.*|libmpc.*|libmpfr.*|libgmp.*|libcrypt.*|perl.*|libperl.*|.*-perl)$'
  pkgs=()
  for p in "${resolved[@]}"; do
    [[ "$p" =~ $skip ]] && continue
    fields="$(apt-cache show --no-all-versions "$p" 2>/dev/null | grep -E '^(Priority|Essential):' || true)"
    grep -q -E 'Priority: (required|important)|Essential: yes' <<<"$fields" && continue
    pkgs+=("$p")
  done
  say "downloading ${#pkgs[@]} packages into $dir/debs"
  (cd "$dir/debs" && apt-get download "${pkgs[@]}" >/dev/null 2>"$dir/download.log") ||
    fail "apt-get download (see $dir/download.log)" "run apt-get update first, or check the mirror"
  for deb in "$dir"/debs/*.deb; do dpkg-deb -x "$deb" "$dir/root"; done
  say "unpacked into $dir/root ($(du -sh "$dir/root" | cut -f1)); on the GPU machine: XMOD_GPU_DEPS=$dir bash bench/gpu_check.sh"
  exit 0
fi

cpu=0
[ "${1:-}" = "--cpu" ] && cpu=1
build="${XMOD_GPU_BUILD:-build-gpu}"
deps="${XMOD_GPU_DEPS:-}"
[ -z "$deps" ] && [ -d bench/gpu-deps/root ] && deps=bench/gpu-deps
# Finding LibTorch and the carried packages is shared with deploy/build-gpu.sh.
source deploy/libtorch-env.sh
source deploy/ccache-env.sh  # objects shared with other checkouts and builds
xmod_prefix_path=""
[ -n "$deps" ] && xmod_use_carried_deps "$deps"

# -- LibTorch -------------------------------------------------------------------
if [ -n "${XMOD_TORCH_PREFIX:-}" ] || [ "$cpu" = 0 ]; then
  xmod_find_torch
  xmod_prefix_path="${xmod_torch_prefix}${xmod_prefix_path:+;$xmod_prefix_path}"
fi
prefix_path="$xmod_prefix_path"

# -- Tools ------------------------------------------------------------------------
command -v cmake >/dev/null || fail "cmake is not on PATH" "install CMake >= 3.22, or carry it with --prepare-deps"
command -v c++ >/dev/null || fail "no C++ compiler (c++) on PATH" "install g++ (12 or later)"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)

# -- Build --------------------------------------------------------------------------
start=$SECONDS
mkdir -p "$build"
build_type="${XMOD_GPU_BUILD_TYPE:-Release}"
say "configuring $build ($build_type, XMOD_WORKER_ONLY: xmod-train and gpu_bench only)"
cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE="$build_type" -DXMOD_WORKER_ONLY=ON \
  ${prefix_path:+-DCMAKE_PREFIX_PATH="$prefix_path"} >"$build/configure.log" 2>&1 ||
  fail "cmake configure (last lines of $build/configure.log:)
$(tail -n 15 "$build/configure.log")" "install what it names, or carry it with --prepare-deps"
say "building"
cmake --build "$build" --target xmod-train gpu_bench -j "$(nproc)" >"$build/build.log" 2>&1 ||
  fail "the build (last lines of $build/build.log:)
$(tail -n 20 "$build/build.log")" "see the log; a compiler or LibTorch mismatch is named there"
say "built in $((SECONDS - start)) s"

# -- Run ------------------------------------------------------------------------------
args=(--json "$build/gpu_check.json")
if [ "$cpu" = 1 ]; then
  args+=(--small --repeats 3 --curve-steps 20 --cpu-steps 10 --threads 2)
else
  peak="${XMOD_PEAK_TFLOPS:-}"
  if [ -z "$peak" ] && command -v nvidia-smi >/dev/null; then
    name="$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)"
    # Dense bf16 tensor-core peaks from the vendors' data sheets (SXM parts).
    case "$name" in
      *H200*|*H100*) peak=989 ;;
      *A100*) peak=312 ;;
      *L40S*) peak=362 ;;
    esac
    say "GPU: $name${peak:+ (dense bf16 peak $peak TFLOP/s)}"
  fi
  [ -n "$peak" ] && args+=(--peak-tflops "$peak")
  [ -z "$peak" ] && say "no bf16 peak known for this GPU: MFU is not computed (set XMOD_PEAK_TFLOPS)"
fi
"$build/bin/gpu_bench" "${args[@]}" || fail "gpu_bench (its lines above say which part)" "see docs/gpu-check.md"
say "figures in $build/gpu_check.json"
