#!/usr/bin/env bash
# Starts a sweep on Slurm: submits the coordinator job, then the worker-group
# array (held, and starting only after the coordinator), waits for the
# coordinator's address file, submits SPEC to it and releases the workers.
#   deploy/slurm/submit-sweep.sh sweeps/xmod-cluster.yaml
# Environment: XMOD_BIN, XMOD_RUN_DIR, XMOD_DB, XMOD_TOKEN_FILE, XMOD_PORT, XMOD_SIF
# (an Apptainer image to run xmod from, e.g. xmod.sif; see the .sbatch files),
# XMOD_QUEUE_WAIT_SECONDS (default 1800: how long the coordinator may queue; the wait
# stops early when the coordinator job has ended or can never start).
# XMOD_WAIT_SECONDS is the worker groups' own wait for the address file (workers.sbatch).
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
wait_seconds="${XMOD_QUEUE_WAIT_SECONDS:-1800}"
run=()
if [ -n "${XMOD_SIF:-}" ]; then
  mkdir -p "$XMOD_RUN_DIR"
  run=(apptainer exec --bind "$XMOD_RUN_DIR" "$XMOD_SIF")
  xmod=/usr/local/bin/xmod
else
  xmod="$XMOD_BIN/xmod"
fi

# Check the spec here, before anything is queued (exit 2 names file:line:field).
"${run[@]}" "$xmod" expand "$spec" >/dev/null

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

later() {
  echo "  Later: xmod submit $spec --coordinator \$(cat $addr_file) --token-file $XMOD_TOKEN_FILE" >&2
  echo "         scontrol release $workers" >&2
  echo "  Or give up: scancel $coord $workers   (the held worker array is still queued)" >&2
}
deadline=$((SECONDS + wait_seconds))
until [ -s "$addr_file" ]; do
  # The coordinator's state: gone from the queue or ended means it will not come
  # up; pending for a reason no wait cures means it never will.
  state=$(squeue -h -j "$coord" -o "%T %r" 2>/dev/null || true)
  case "$state" in
    "" | COMPLETED* | FAILED* | CANCELLED* | TIMEOUT* | NODE_FAIL* | OUT_OF_MEMORY* | BOOT_FAIL*)
      echo "submit-sweep: coordinator job $coord ended (${state:-no longer queued}) before publishing $addr_file" >&2
      log=$(ls -t xmod-coordinator-"$coord".out 2>/dev/null | head -1 || true)
      [ -n "$log" ] && tail -n 5 "$log" >&2
      later
      exit 1
      ;;
    *PartitionConfig* | *PartitionTimeLimit* | *ReqNodeNotAvail* | *PartitionNodeLimit* | *InvalidAccount* | *InvalidQOS*)
      echo "submit-sweep: coordinator job $coord cannot start: $state (edit its #SBATCH lines)" >&2
      later
      exit 1
      ;;
  esac
  if [ "$SECONDS" -ge "$deadline" ]; then
    echo "submit-sweep: $addr_file did not appear within ${wait_seconds}s (squeue -j $coord: $state)." >&2
    later
    exit 1
  fi
  sleep 5
done
addr=$(<"$addr_file")

"${run[@]}" "$xmod" submit "$spec" --coordinator "$addr" --token-file "$XMOD_TOKEN_FILE"
scontrol release "$workers"
echo "submit-sweep: coordinator at $addr; follow with:"
echo "  ${run[*]:+${run[*]} }$xmod status --coordinator $addr --token-file $XMOD_TOKEN_FILE --watch"
