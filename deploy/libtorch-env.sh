# Sourced by bench/gpu_check.sh and deploy/build-gpu.sh: finds a LibTorch outside
# Debian (a PyTorch installation's, or XMOD_TORCH_PREFIX) and puts unpacked
# packages (bench/gpu_check.sh --prepare-deps) on the paths. The caller defines
# say MESSAGE and fail WHAT [WHAT_TO_DO] (which exits) before sourcing it.

# xmod_use_carried_deps DIR: DIR/root holds unpacked Debian packages. Puts their
# programs and libraries on PATH and LD_LIBRARY_PATH, points Open MPI at where it
# was unpacked, and appends their CMake prefixes to xmod_prefix_path.
xmod_use_carried_deps() {
  local deps=$1 d
  [ -d "$deps/root" ] || fail "XMOD_GPU_DEPS=$deps has no root/ folder" "make it with bash bench/gpu_check.sh --prepare-deps $deps"
  d="$(cd "$deps/root" && pwd)"
  export PATH="$d/usr/bin:$PATH"
  export LD_LIBRARY_PATH="$d/usr/lib/x86_64-linux-gnu:$d/usr/lib/x86_64-linux-gnu/openmpi/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export OPAL_PREFIX="$d/usr/lib/x86_64-linux-gnu/openmpi"  # Open MPI found where it was unpacked
  CMAKE_ROOT="$(ls -d "$d"/usr/share/cmake-* 2>/dev/null | head -n 1)"
  if [ -n "$CMAKE_ROOT" ]; then export CMAKE_ROOT; else unset CMAKE_ROOT; fi
  xmod_prefix_path="${xmod_prefix_path:+$xmod_prefix_path;}$d/usr;$d/usr/lib/x86_64-linux-gnu/cmake"
  say "using the unpacked packages in $d"
}

# xmod_find_torch: sets xmod_torch_prefix (LibTorch's CMake prefix) from
# XMOD_TORCH_PREFIX or else from python3's torch, xmod_torch_config (its
# TorchConfig.cmake), xmod_torch_version, xmod_torch_lib (its library folder) and
# xmod_torch_cuda (the CUDA version it was built for, empty for a CPU build).
# Refuses a LibTorch built with the old C++ ABI: Debian's libraries use the new one.
xmod_find_torch() {
  local from="XMOD_TORCH_PREFIX" abi=""
  xmod_torch_prefix="${XMOD_TORCH_PREFIX:-}"
  if [ -z "$xmod_torch_prefix" ]; then
    from="python3's torch"
    command -v python3 >/dev/null || fail "python3 is not on PATH" "set XMOD_TORCH_PREFIX to LibTorch's CMake prefix"
    xmod_torch_prefix="$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null)" ||
      fail "python3 cannot import torch" "install PyTorch with CUDA, or set XMOD_TORCH_PREFIX"
    abi="$(python3 -c 'import torch; print(int(torch.compiled_with_cxx11_abi()))' 2>/dev/null || echo 1)"
  fi
  xmod_torch_config="$(find "$xmod_torch_prefix" -maxdepth 4 -name TorchConfig.cmake 2>/dev/null | head -n 1 || true)"
  xmod_torch_version="" xmod_torch_lib=""
  if [ -n "$xmod_torch_config" ]; then
    # TorchConfig.cmake states the ABI its consumers must compile with.
    [ -z "$abi" ] && grep -q '_GLIBCXX_USE_CXX11_ABI=0' "$xmod_torch_config" && abi=0
    xmod_torch_version="$(sed -n 's/^set(PACKAGE_VERSION "\(.*\)")/\1/p' "$(dirname "$xmod_torch_config")/TorchConfigVersion.cmake" 2>/dev/null || true)"
    # <prefix>/share/cmake/Torch/TorchConfig.cmake -> <prefix>/lib
    xmod_torch_lib="$(cd "$(dirname "$xmod_torch_config")/../../.." && pwd)/lib"
  else
    say "no Torch/TorchConfig.cmake under $xmod_torch_prefix ($from): CMake will search its usual places"
  fi
  [ "$abi" != 0 ] || fail "this LibTorch is built with the old C++ ABI (_GLIBCXX_USE_CXX11_ABI=0); Debian's Abseil and fmt (and gRPC and Protobuf, which xmod-worker links beside LibTorch) use the new one" \
    "use a PyTorch built with the CXX11 ABI (pip wheels from 2.7 on, NGC containers), or a LibTorch cxx11-abi download via XMOD_TORCH_PREFIX"
  xmod_torch_cuda=""
  if [ -n "$xmod_torch_lib" ] && ls "$xmod_torch_lib"/libc10_cuda.so* >/dev/null 2>&1; then
    if [ "$from" != XMOD_TORCH_PREFIX ]; then
      xmod_torch_cuda="$(python3 -c 'import torch; print(torch.version.cuda or "")' 2>/dev/null || true)"
    fi
    xmod_torch_cuda="${xmod_torch_cuda:-of a version not known here}"
  fi
  if [ -n "$xmod_torch_config" ]; then
    local kind="CPU only"
    [ -n "$xmod_torch_cuda" ] && kind="CUDA $xmod_torch_cuda"
    say "LibTorch ${xmod_torch_version:-?} from $from: $xmod_torch_prefix ($kind)"
  fi
}
