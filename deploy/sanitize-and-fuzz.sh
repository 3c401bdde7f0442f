#!/usr/bin/env bash
# The sanitizer and fuzzing leg of the test command: builds the code that reads
# untrusted input with clang, AddressSanitizer and UndefinedBehaviorSanitizer (into
# build-sanitize/, or $XMOD_SANITIZE_DIR), runs its tests there, then runs each
# libFuzzer target of fuzz/ for FUZZ_SECONDS (default 60) from a seed corpus made of
# the project's own fixtures. Exits non-zero on any sanitizer report, failing test or
# fuzzer crash; a crash leaves its input in build-sanitize/fuzz/<target>/crash-*.
#
# What it builds and runs (the list is kSanitized below): the job file, token data
# and accounting (common_test), the sweep parser and expansion (sweep_test), the lease
# rules (rules_test), the SQLite store and its fault paths (store_test,
# storage_faults_test), the scheduler (scheduler_test) and the gRPC service with its
# request bounds (service_test), and the four fuzzers. The rest (fits, reports,
# plots, the law order, the dashboard, the CLI, the worker) reads only what these
# accepted; its tests run unsanitized in the main leg (deploy/test.sh).
#
# A longer run: FUZZ_SECONDS=3600 FUZZ_RUNS=-1 bash deploy/sanitize-and-fuzz.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source deploy/ccache-env.sh
# A ccache of its own: the clang objects of this leg are never evicted by the main
# build's (gcc, LibTorch) or the GPU check's, so a warm run rebuilds nothing.
export CCACHE_DIR="${XMOD_SANITIZE_CCACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/xmod/ccache-sanitize}"
mkdir -p "$CCACHE_DIR"
dir="${XMOD_SANITIZE_DIR:-build-sanitize}"
seconds="${FUZZ_SECONDS:-60}"
# A fixed seed and a bounded number of inputs: the run is the same sequence on
# every machine (a slower one stops earlier in it), so CI is not a lottery.
runs="${FUZZ_RUNS:-20000}"
if ! command -v clang++ >/dev/null; then
  echo "sanitize-and-fuzz: clang++ is missing; run deploy/install-deps.sh (clang, libclang-rt-dev)" >&2
  exit 1
fi
start=$(date +%s)
mkdir -p "$dir"
# Without the dashboard's chart bundle (no npm step): this leg keeps the stand-in
# that a build without npm serves under test (docs/dashboard.md).
if ! CC=clang CXX=clang++ cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DXMOD_FUZZ=ON -DXMOD_BUILD_WORKER=OFF -DXMOD_BUILD_BENCH=OFF \
    -DXMOD_DASHBOARD_CHARTS=OFF >"$dir/configure.log" 2>&1; then
  echo "sanitize-and-fuzz: cmake failed (clang build); see $dir.configure.log" >&2
  tail -20 "$dir/configure.log" >&2
  exit 1
fi
# kSanitized: the test binaries and fuzzers this leg builds (nothing else: no xmod,
# no Ceres fits, no dashboard).
tests=(common_test sweep_test rules_test store_test storage_faults_test scheduler_test service_test)
fuzzers=(sweep_fuzz job_file_fuzz token_data_fuzz request_bounds_fuzz)
targets=()
for t in "${tests[@]}" "${fuzzers[@]}"; do targets+=(--target "$t"); done
cmake --build "$dir" -j "$(nproc)" "${targets[@]}"
built=$(date +%s)
echo "sanitize-and-fuzz: built in $((built - start)) s"

# Their tests under ASan and UBSan. Left out: timing tests (a speed bound means
# nothing under a sanitizer); the binaries not built here ("_NOT_BUILT") and the
# script tests (source checks, deploy scripts, docs), which the main leg runs; and
# the power check's simulations (Power.Simulates*: Ceres fits of simulated sweeps, 283 s
# under ASan against a few seconds unsanitized, reading only what the parser
# accepted), which the main leg runs.
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1"
export LSAN_OPTIONS="suppressions=$PWD/deploy/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
ctest --test-dir "$dir" --output-on-failure -j "$(nproc)" --timeout 900 -L "unit|integration" \
  -E "_NOT_BUILT$|^(Format|Includes|Docs|Deploy|Browser)\.|^Power\.Simulates|TakesWellUnder"
tested=$(date +%s)
echo "sanitize-and-fuzz: tests under ASan+UBSan in $((tested - built)) s"

# Seed corpora from the project's own inputs.
corpus="$dir/fuzz-corpus"
rm -rf "$corpus"
mkdir -p "$corpus"/{sweep,job_file,token_data,request_bounds}
cp sweeps/*.yaml tests/fixtures/*.yaml tests/fixtures/bad/*.yaml "$corpus/sweep/"
# Job files as `xmod expand` writes them: the main leg's xmod (this leg builds no
# xmod of its own), or, without one, the job file fixtures of the tests.
xmod="${XMOD_BUILD_DIR:-build}/bin/xmod"
if [ -x "$xmod" ]; then
  "$xmod" expand sweeps/smoke.yaml --format json >"$corpus/job_file/smoke.json"
else
  echo "sanitize-and-fuzz: no $xmod (build the main leg first for a richer job file corpus)"
  echo '[]' >"$corpus/job_file/smoke.json"
fi
python3 - "$corpus/job_file" <<'PY'
import json, sys
jobs = json.load(open(sys.argv[1] + "/smoke.json"))
for i, job in enumerate(jobs):
    json.dump(job, open(f"{sys.argv[1]}/job{i}.json", "w"))
PY
printf '{"format":"xmod-tokens","version":1,"dtype":"uint16","vocab_size":256,"tokenizer":"bytes","train_tokens":4,"val_tokens":2}\0abcdefgh\0ijkl' \
  >"$corpus/token_data/small"
printf '\x04' >"$corpus/request_bounds/empty"

for target in sweep job_file token_data request_bounds; do
  mkdir -p "$dir/fuzz/$target"
  echo "sanitize-and-fuzz: fuzzing ${target}_fuzz for $seconds s"
  if ! (cd "$dir/fuzz/$target" &&
        "../../bin/${target}_fuzz" -seed=1 -runs="$runs" -max_total_time="$seconds" -timeout=10 \
          -rss_limit_mb=2048 \
          -print_final_stats=1 "../../fuzz-corpus/$target" >"../${target}.log" 2>&1); then
    echo "sanitize-and-fuzz: ${target}_fuzz found a failure; input and log in $dir/fuzz/" >&2
    tail -40 "$dir/fuzz/${target}.log" >&2
    exit 1
  fi
  grep -E "^stat::number_of_executed_units|^#[0-9]+.*DONE" "$dir/fuzz/${target}.log" | tail -1 || true
done
echo "sanitize-and-fuzz: done in $(( $(date +%s) - start )) s"
