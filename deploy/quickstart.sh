#!/usr/bin/env bash
# The first command of the README: installs what is missing, builds, prepares the
# Brown corpus, and runs the demo sweep end to end with the embedded coordinator
# (`xmod run`): two worker groups of one rank, results in demo.db (or $XMOD_DB).
# Run again, it continues where it stopped.
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/install-deps.sh
bash deploy/build.sh
bash deploy/prepare-demo-data.sh
build/bin/xmod data stats data/brown
exec build/bin/xmod run sweeps/demo.yaml --db "${XMOD_DB:-demo.db}" --groups "${XMOD_GROUPS:-2}" --ranks 1
