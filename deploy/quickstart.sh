#!/usr/bin/env bash
# The first command of the README: installs what is missing, builds, prepares the
# Brown corpus, resolves the demo sweep, records it in demo.db (or $XMOD_DB), and
# trains its smallest job on the corpus with xmod-train.
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/install-deps.sh
bash deploy/build.sh
bash deploy/prepare-demo-data.sh
db="${XMOD_DB:-demo.db}"
build/bin/xmod expand sweeps/demo.yaml
build/bin/xmod submit sweeps/demo.yaml --db "$db"
build/bin/xmod status --db "$db"
build/bin/xmod data stats data/brown
job=$(mktemp --suffix=.json)
trap 'rm -f "$job"' EXIT
build/bin/xmod expand sweeps/demo.yaml --format json |
  python3 -c 'import json, sys; jobs = json.load(sys.stdin); json.dump(min(jobs, key=lambda j: j["train_flops"]), sys.stdout)' >"$job"
build/bin/xmod-train --job "$job" --run-dir runs
