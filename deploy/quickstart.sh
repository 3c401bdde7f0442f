#!/usr/bin/env bash
# The first command of the README: installs what is missing, builds, prepares the
# Brown corpus, and runs the demo sweep end to end with the embedded coordinator
# (`xmod run`): two worker groups of one rank, results and both fitted laws in
# demo.db (or $XMOD_DB), then the sweep's plots in plots/. Run again, it continues
# where it stopped.
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/install-deps.sh
bash deploy/build.sh
bash deploy/prepare-demo-data.sh
build/bin/xmod data stats data/brown
db="${XMOD_DB:-demo.db}"
status=0
build/bin/xmod run sweeps/demo.yaml --db "$db" --groups "${XMOD_GROUPS:-2}" --ranks 1 || status=$?
# The plots of whatever finished (a partial sweep still has curves to show).
build/bin/xmod plot demo --db "$db" --out plots || true
exit "$status"
