#!/bin/bash
# Builds xmod, xmod-worker and xmod-train for GPU worker groups: against a CUDA
# LibTorch, with the NCCL communicator (docs/deploy-gpu.md).
#
#   bash deploy/build-gpu.sh                        # the LibTorch of python3's torch
#   XMOD_TORCH_PREFIX=DIR bash deploy/build-gpu.sh  # a LibTorch download (DIR holds share/cmake/Torch)
#   bash deploy/build-gpu.sh --debian-torch         # Debian's libtorch-dev: CPU only (the CPU image)
#
# Arguments after the options go to cmake's configure step. Environment:
# XMOD_TORCH_PREFIX, XMOD_CUDA_BUILD (build folder, default build-cuda),
# XMOD_BUILD_TYPE (default Release), XMOD_ALLOW_CPU_TORCH=1 (go on with a LibTorch
# that has no CUDA), NCCL_HOME (where nccl.h and libnccl are, when CMake does not
# find them). The other libraries come from Debian's packages (deploy/install-deps.sh;
# XMOD_DEPS_SCOPE=image XMOD_DEBIAN_TORCH=0 installs just what this build needs).
# Prints the CMake lines naming the LibTorch, CUDA and NCCL found, then each binary's
# --version. Every failing step says what failed and what to do.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo"
say() { echo "build-gpu: $*"; }
fail() {
  echo "build-gpu: FAILED: $1" >&2
  [ -n "${2:-}" ] && echo "build-gpu: what to do: $2" >&2
  exit 1
}

debian_torch=0
if [ "${1:-}" = "--debian-torch" ]; then
  debian_torch=1
  shift
fi
build="${XMOD_CUDA_BUILD:-build-cuda}"
source deploy/ccache-env.sh
source deploy/libtorch-env.sh

# -- Tools ------------------------------------------------------------------------
command -v cmake >/dev/null || fail "cmake is not on PATH" "install CMake >= 3.22 (deploy/install-deps.sh)"
command -v c++ >/dev/null || fail "no C++ compiler (c++) on PATH" "install g++ (12 or later)"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)

# -- LibTorch, CUDA, NCCL ------------------------------------------------------------
cmake_args=()
want_cuda=1
if [ "$debian_torch" = 1 ]; then
  want_cuda=0
  ls /usr/lib/*/cmake/Torch/TorchConfig.cmake >/dev/null 2>&1 ||
    fail "Debian's LibTorch is not installed (no /usr/lib/*/cmake/Torch)" "install libtorch-dev (bash deploy/install-deps.sh)"
  say "Debian's LibTorch: CPU only; the worker binaries train on the CPU whatever the machine has"
else
  xmod_find_torch
  cmake_args+=(-DCMAKE_PREFIX_PATH="$xmod_torch_prefix")
  if [ -z "$xmod_torch_cuda" ]; then
    [ "${XMOD_ALLOW_CPU_TORCH:-0}" = 1 ] ||
      fail "this LibTorch has no CUDA (no libc10_cuda in ${xmod_torch_lib:-its folder})" \
        "install a CUDA PyTorch (e.g. pip install torch --index-url https://download.pytorch.org/whl/cu126), point XMOD_TORCH_PREFIX at a CUDA LibTorch, or build for the CPU with --debian-torch"
    want_cuda=0
    say "XMOD_ALLOW_CPU_TORCH=1: going on with a CPU-only LibTorch"
  fi
fi
if [ "$want_cuda" = 1 ]; then
  # A CUDA LibTorch's CMake files look for the CUDA toolkit, and the NCCL
  # communicator compiles against its headers: the toolkit (nvcc) must be here.
  nvcc="$(command -v nvcc || true)"
  [ -z "$nvcc" ] && [ -x /usr/local/cuda/bin/nvcc ] && nvcc=/usr/local/cuda/bin/nvcc
  [ -n "$nvcc" ] || fail "no CUDA toolkit (nvcc is neither on PATH nor in /usr/local/cuda/bin)" \
    "install the CUDA toolkit of LibTorch's CUDA version ($xmod_torch_cuda), e.g. an nvidia/cuda devel image, and put its bin/ on PATH"
  toolkit="$("$nvcc" --version | sed -n 's/.*release \([0-9][0-9.]*\).*/\1/p' | head -n 1)"
  say "CUDA toolkit $toolkit ($nvcc)"
  if [[ "$xmod_torch_cuda" =~ ^[0-9]+ ]] && [ "${toolkit%%.*}" != "${xmod_torch_cuda%%.*}" ]; then
    fail "the CUDA toolkit is $toolkit but LibTorch was built for CUDA $xmod_torch_cuda" \
      "install the toolkit of the same major version, or a PyTorch built for CUDA ${toolkit%%.*}"
  fi
  cmake_args+=(-DCUDAToolkit_ROOT="$(cd "$(dirname "$nvcc")/.." && pwd)")
  # A pip PyTorch carries its own NCCL (nvidia-nccl-cu12); linking the same one
  # keeps one NCCL in the process.
  nccl="${xmod_torch_lib:+$xmod_torch_lib/../../nvidia/nccl}"
  if [ -n "$nccl" ] && [ -f "$nccl/include/nccl.h" ] && ls "$nccl"/lib/libnccl.so* >/dev/null 2>&1; then
    nccl="$(cd "$nccl" && pwd)"
    cmake_args+=(-DNCCL_INCLUDE_DIR="$nccl/include" -DNCCL_LIBRARY="$(ls "$nccl"/lib/libnccl.so* | head -n 1)")
    say "NCCL: PyTorch's own, $nccl"
  fi
fi

# -- Configure ------------------------------------------------------------------------
start=$SECONDS
mkdir -p "$build"
say "configuring $build"
cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE="${XMOD_BUILD_TYPE:-Release}" \
  -DXMOD_BUILD_TESTS=OFF -DXMOD_BUILD_BENCH=OFF "${cmake_args[@]}" "$@" >"$build/configure.log" 2>&1 ||
  fail "cmake configure (last lines of $build/configure.log:)
$(tail -n 15 "$build/configure.log")" "install what it names (bash deploy/install-deps.sh)"
# What CMake found, in its own words (CMakeLists.txt and worker/CMakeLists.txt).
grep -E '^-- (xmod: |Found CUDAToolkit|Found NCCL)' "$build/configure.log" | sed 's/^-- /build-gpu: cmake: /' || true
grep -q '^-- xmod: LibTorch ' "$build/configure.log" ||
  fail "CMake found no LibTorch or no MPI, so it would build the orchestrator only (see $build/configure.log)" \
    "install libopenmpi-dev, and check the LibTorch prefix named above"
if [ "$want_cuda" = 1 ]; then
  grep -q '^-- xmod: LibTorch .*(with CUDA)' "$build/configure.log" ||
    fail "CMake's LibTorch is not the CUDA one named above ($(grep '^-- xmod: LibTorch' "$build/configure.log"))" \
      "remove $build/CMakeCache.txt (an old Torch_DIR stays cached) and run again"
  grep -q '^-- xmod: CUDA .*building the NCCL communicator' "$build/configure.log" ||
    fail "CMake found no NCCL, so GPU groups could not all-reduce" \
      "install NCCL (libnccl-dev, or PyTorch's nvidia-nccl-cu12) or set NCCL_HOME to the folder holding include/nccl.h and lib/libnccl.so"
fi

# -- Build ------------------------------------------------------------------------------
say "building xmod, xmod-worker and xmod-train"
cmake --build "$build" --target xmod xmod-sentencepiece xmod-worker xmod-train -j "$(nproc)" >"$build/build.log" 2>&1 ||
  fail "the build (last lines of $build/build.log:)
$(tail -n 20 "$build/build.log")" "see the log; a compiler or LibTorch mismatch is named there"
say "built in $((SECONDS - start)) s"
for b in xmod xmod-worker xmod-train; do
  if ldd "$build/bin/$b" 2>/dev/null | grep -q 'libcuda.so.1 => not found'; then
    say "$b --version not run: it needs the GPU driver's libcuda.so.1, which this machine lacks"
    continue
  fi
  "$build/bin/$b" --version | sed "s/^/build-gpu: /" ||
    fail "$build/bin/$b --version" "a library it links is not found at run time: run ldd $build/bin/$b"
done
say "binaries in $build/bin"
