#!/usr/bin/env bash
# The test command: installs what is missing, builds, and runs the whole suite
# (unit, integration and end-to-end tests) with CTest. Exits non-zero when any
# test fails. Extra arguments go to ctest (e.g. -L unit).
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/install-deps.sh
bash deploy/build.sh
ctest --test-dir "${XMOD_BUILD_DIR:-build}" --output-on-failure -j "$(nproc)" --timeout 600 "$@"
