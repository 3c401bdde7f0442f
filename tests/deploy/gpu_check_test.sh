#!/bin/bash
# bench/gpu_check.sh as far as a CPU allows: its build (XMOD_WORKER_ONLY, against
# this machine's LibTorch) and its measurements with small shapes, checked in
# the JSON it writes; and its clear failures when LibTorch or the carried
# packages cannot be found. Usage: gpu_check_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src="$1"
# Beside the main build, at its depth and with its build type, so that ccache
# (whose base_dir makes paths relative) reuses the main build's objects: the
# worker-only build then compiles a file or two instead of 300 s of LibTorch code.
build="$(cd "$2" && pwd)"
out="$(dirname "$build")/$(basename "$build")-gpu-check"
build_type="$(sed -n 's/^CMAKE_BUILD_TYPE:STRING=//p' "$build/CMakeCache.txt")"
export XMOD_GPU_BUILD_TYPE="${build_type:-Release}"
check() { if ! eval "$1"; then echo "FAILED: $2" >&2; exit 1; fi; }

# Failures say what failed and what to do.
set +e
msg="$(cd "$src" && XMOD_GPU_DEPS=/nonexistent XMOD_GPU_BUILD="$out" bash bench/gpu_check.sh 2>&1)"
code=$?
set -e
check '[ "$code" = 1 ]' "a missing XMOD_GPU_DEPS folder exits 1 (got $code)"
check 'grep -q "has no root/ folder" <<<"$msg" && grep -q "what to do: make it with" <<<"$msg"' \
  "the missing packages folder is named with the fix: $msg"
if ! python3 -c 'import torch' 2>/dev/null; then
  set +e
  msg="$(cd "$src" && XMOD_GPU_BUILD="$out" bash bench/gpu_check.sh 2>&1)"
  code=$?
  set -e
  check '[ "$code" = 1 ] && grep -q "python3 cannot import torch" <<<"$msg"' \
    "no PyTorch is a clear failure: $msg"
fi

# The real build and run on the CPU.
(cd "$src" && XMOD_GPU_BUILD="$out" bash bench/gpu_check.sh --cpu)
json="$out/gpu_check.json"
check '[ -f "$json" ]' "gpu_check.json written"
python3 - "$json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["ok"] is True, r
assert "skipped" in r["all_reduce"] or r["all_reduce"]["seconds"] > 0, r["all_reduce"]
s = r["steps"]
assert s["dense_step_seconds"] > 0 and s["achieved_tflops"] > 0, s
assert 0 < s["xmod_flop_ratio"] < 1 and s["xmod_step_ratio"] > 0, s
c = r["curve"]
assert c["compared_steps"] == 10 and c["device_steps"] == 20, c
assert c["largest_relative_difference"] <= c["tolerance"], c
print("gpu_check --cpu:", json.dumps({"step_ratio": s["xmod_step_ratio"], "flop_ratio": s["xmod_flop_ratio"],
      "curve_difference": c["largest_relative_difference"], "precision": c["device_precision"]}))
PY
echo "gpu_check test passed"
