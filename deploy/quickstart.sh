#!/usr/bin/env bash
# The first command of the README: installs what is missing, builds, then expands
# the demo sweep and records it in demo.db (or $XMOD_DB), and shows its status.
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/install-deps.sh
bash deploy/build.sh
db="${XMOD_DB:-demo.db}"
build/bin/xmod expand sweeps/demo.yaml
build/bin/xmod submit sweeps/demo.yaml --db "$db"
build/bin/xmod status --db "$db"
