#!/usr/bin/env bash
# Starts a sweep on Slurm: submits the coordinator job, then the worker-group
# array (held, and starting only after the coordinator), waits for the
# coordinator's address file, submits SPEC to it and releases the workers.
#   deploy/slurm/submit-sweep.sh sweeps/xmod-cluster.yaml
# Environment: XMOD_BIN, XMOD_RUN_DIR, XMOD_DB, XMOD_TOKEN_FILE, XMOD_PORT (see the
# .sbatch files), XMOD_WAIT_SECONDS (default 1800: how long the coordinator may queue).
set -euo pipefail

if [ $# -ne 1 ]; then
  echo "usage: $0 SPEC.yaml" >&2
  exit 2
fi
spec=$1
here=$(cd "$(dirname "$0")" && pwd)

export XMOD_BIN="${XMOD_BIN:-$PWD/build/bin}"
export XMOD_RUN_DIR="${XMOD_RUN_DIR:-$PWD/xmod-run}"
export XMOD_DB="${XMOD_DB:-$XMOD_RUN_DIR/xmod.db}"
export XMOD_TOKEN_FILE="${XMOD_TOKEN_FILE:-$XMOD_RUN_DIR/token}"
export XMOD_PORT="${XMOD_PORT:-50051}"
wait_seconds="${XMOD_WAIT_SECONDS:-1800}"

# Check the spec here, before anything is queued (exit 2 names file:line:field).
"$XMOD_BIN/xmod" expand "$spec" >/dev/null

mkdir -p "$XMOD_RUN_DIR/runs"
if [ ! -s "$XMOD_TOKEN_FILE" ]; then
  (umask 077; { od -An -N32 -tx1 /dev/urandom | tr -d ' \n'; echo; } >"$XMOD_TOKEN_FILE")
fi
addr_file="$XMOD_RUN_DIR/coordinator.addr"
rm -f "$addr_file"                                  # never read a stale address

coord=$(sbatch --parsable --export=ALL "$here/coordinator.sbatch")
coord=${coord%%;*}                                  # "id;cluster" on federated clusters
workers=$(sbatch --parsable --export=ALL --hold --dependency="after:$coord" "$here/workers.sbatch")
workers=${workers%%;*}
echo "submit-sweep: coordinator job $coord, worker array $workers (held)"

deadline=$((SECONDS + wait_seconds))
until [ -s "$addr_file" ]; do
  if [ "$SECONDS" -ge "$deadline" ]; then
    echo "submit-sweep: $addr_file did not appear within ${wait_seconds}s (squeue -j $coord)." >&2
    echo "  Later: xmod submit $spec --coordinator \$(cat $addr_file) --token-file $XMOD_TOKEN_FILE" >&2
    echo "         scontrol release $workers" >&2
    exit 1
  fi
  sleep 5
done
addr=$(<"$addr_file")

"$XMOD_BIN/xmod" submit "$spec" --coordinator "$addr" --token-file "$XMOD_TOKEN_FILE"
scontrol release "$workers"
echo "submit-sweep: coordinator at $addr; follow with:"
echo "  $XMOD_BIN/xmod status --coordinator $addr --token-file $XMOD_TOKEN_FILE --watch"
