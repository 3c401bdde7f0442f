#!/bin/bash
# deploy/slurm/ on a real one-node Slurm (deploy/slurm/box.sh), as a user would run
# it: copies of the .sbatch files with only the site values changed (CPUs, array
# size, time), submit-sweep.sh over a small sweep; then a worker step gets
# `scancel --signal=USR2` and ends as a preempted attempt that the next group
# resumes, and `scontrol requeue` of the coordinator job loses nothing: the
# coordinator comes back (Slurm holds a requeued job about two minutes) and the
# sweep finishes without help. About 4 minutes. Exits 77 (skipped) with the
# reason where Slurm cannot be installed or started, or with XMOD_SLURM_BOX_TEST=0.
# Usage: slurm_box_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src="$1"
bin="$2/bin"
work="$2/slurm-box-test"
export XMOD_SLURM_BOX="$work/box"
check() { if ! eval "$1"; then echo "FAILED: $2" >&2; dump; exit 1; fi; }
dump() {
  echo "--- squeue" >&2; squeue 2>&1 | tail -n 20 >&2 || true
  for f in "$work"/site/*.out; do [ -f "$f" ] && { echo "--- $f" >&2; tail -n 20 "$f" >&2; }; done
}

if [ "${XMOD_SLURM_BOX_TEST:-1}" = 0 ]; then
  echo "SKIPPED: XMOD_SLURM_BOX_TEST=0 (${XMOD_SLURM_BOX_WHY:-asked to skip})"
  exit 77
fi
rm -rf "$work"
mkdir -p "$work/site"
set +e
started="$(bash "$src/deploy/slurm/box.sh" start 2>"$work/box-start.log")"
code=$?
set -e
if [ "$code" != 0 ]; then
  echo "SKIPPED: Slurm could not be installed or started here: $(tail -n 1 "$work/box-start.log")"
  exit 77
fi
eval "$started"  # SLURM_CONF
trap 'bash "$src/deploy/slurm/box.sh" stop' EXIT

# The site values a user sets for this node: one CPU for the coordinator, one
# rank on one CPU per group, two groups, short limits.
sed -e 's/^#SBATCH --cpus-per-task=.*/#SBATCH --cpus-per-task=1/' \
  -e 's/^#SBATCH --time=.*/#SBATCH --time=00:20:00/' \
  -e 's/^#SBATCH --mem=.*/#SBATCH --mem=2G/' \
  "$src/deploy/slurm/coordinator.sbatch" >"$work/site/coordinator.sbatch"
sed -e 's/^#SBATCH --array=.*/#SBATCH --array=0-1/' \
  -e 's/^#SBATCH --ntasks-per-node=.*/#SBATCH --ntasks-per-node=1/' \
  -e 's/^#SBATCH --cpus-per-task=.*/#SBATCH --cpus-per-task=1/' \
  -e 's/^#SBATCH --time=.*/#SBATCH --time=00:15:00/' \
  "$src/deploy/slurm/workers.sbatch" >"$work/site/workers.sbatch"
cp "$src/deploy/slurm/submit-sweep.sh" "$work/site/"
# Only the #SBATCH site lines differ from the shipped scripts.
site='^#SBATCH --(cpus-per-task|time|mem|array|ntasks-per-node)='
for f in coordinator.sbatch workers.sbatch; do
  check 'diff <(grep -Ev "$site" "$src/deploy/slurm/$f") <(grep -Ev "$site" "$work/site/$f") >/dev/null' \
    "$f differs from the shipped script beyond its site values"
done

# A sweep long enough to interrupt twice: tests/fixtures/long.yaml's one job at
# 3,840 steps (about 3 minutes here), checkpointed every 10.
sed -e 's/^name: .*/name: slurmbox/' -e 's/^  tokens: .*/  tokens: 7864320/' \
  "$src/tests/fixtures/long.yaml" >"$work/sweep.yaml"

# XMOD_HOST: the name workers dial; a minimal machine may not resolve its hostname.
export XMOD_BIN="$bin" XMOD_RUN_DIR="$work/run" XMOD_WAIT_SECONDS=120 XMOD_HOST=127.0.0.1
cd "$work/site"
start=$SECONDS
bash ./submit-sweep.sh "$work/sweep.yaml" >"$work/submit.log" 2>&1 ||
  { cat "$work/submit.log" >&2; check false "submit-sweep.sh failed"; }
addr=$(cat "$XMOD_RUN_DIR/coordinator.addr")
token="$XMOD_RUN_DIR/token"
check '[[ "$addr" != *:0 && "$addr" == *:* ]]' "the published address has a real port: $addr"
status() { "$bin/xmod" status --coordinator "$addr" --token-file "$token" 2>/dev/null; }
# A read-only count from the database (SQLite readers do not disturb the server).
db="$XMOD_RUN_DIR/xmod.db"
sqlite_count() { "$bin/xmod" sql --db "$db" --format csv "$1" 2>/dev/null | tail -n 1; }

# Wait for a checkpoint, then preempt the running worker step with USR2.
deadline=$((SECONDS + 300))
until compgen -G "$XMOD_RUN_DIR/runs/*/checkpoints/*" >/dev/null; do
  check '[ $SECONDS -lt $deadline ]' "no checkpoint within 300 s"
  sleep 1
done
group=$(squeue -h -t RUNNING -n xmod-workers -o %i | head -n 1)
check '[ -n "$group" ]' "no running worker group"
scancel --signal=USR2 "$group"

# The next group resumes; then the coordinator job is requeued under it.
deadline=$((SECONDS + 120))
until [ "$(sqlite_count "SELECT COUNT(*) FROM attempts WHERE attempt = 2")" = 1 ]; do
  check '[ $SECONDS -lt $deadline ]' "no second attempt within 120 s of the USR2"
  sleep 1
done
coord=$(squeue -h -n xmod-coordinator -o %i | head -n 1)
metrics_before=$(sqlite_count "SELECT COUNT(*) FROM metrics")
scontrol requeue "$coord"
deadline=$((SECONDS + 400))
until [ -s "$XMOD_RUN_DIR/coordinator.addr" ] && status | grep -q slurmbox; do
  check '[ $SECONDS -lt $deadline ]' "the requeued coordinator was not back within 400 s"
  sleep 2
done
check '[ "$(cat "$XMOD_RUN_DIR/coordinator.addr")" = "$addr" ]' \
  "the requeued coordinator came back on another address: $(cat "$XMOD_RUN_DIR/coordinator.addr") (was $addr)"
check '[ "$(sqlite_count "SELECT COUNT(*) FROM metrics")" -ge "$metrics_before" ]' \
  "the requeue lost metric rows"

deadline=$((SECONDS + 600))
until status | grep -q "slurmbox" && ! status | awk '$1 == "slurmbox" {exit !($2 + $3 + $4 > 0)}'; do
  check '[ $SECONDS -lt $deadline ]' "the sweep did not finish within 600 s: $(status)"
  sleep 2
done
elapsed=$((SECONDS - start))
scancel -n xmod-coordinator
sleep 3

count() { sqlite_count "$1"; }
check '[ "$(count "SELECT COUNT(*) FROM jobs WHERE status = '"'"'succeeded'"'"'")" = "$(count "SELECT COUNT(*) FROM jobs")" ]' \
  "every job succeeded"
check '[ "$(count "SELECT COUNT(*) FROM attempts WHERE status = '"'"'preempted'"'"'")" -ge 1 ]' \
  "the USR2 to the worker step ended as a preempted attempt"
check '[ "$(count "SELECT COUNT(*) FROM attempts WHERE resumed_from_step > 0")" -ge 1 ]' \
  "a later attempt resumed from the preempted one's checkpoint"
check 'grep -q "preempted at step" "$work"/site/xmod-workers-*.out' "the group log says it was preempted"
check '[ "$(count "SELECT COUNT(*) FROM metrics WHERE name = '"'"'train_loss'"'"'")" = "$(count "SELECT SUM(steps) FROM jobs")" ]' \
  "every step has exactly one train_loss row (no hole, no double across the interruptions)"
check 'grep -q "restart 0" "$work"/site/xmod-coordinator-*.out && grep -q "restart 1" "$work"/site/xmod-coordinator-*.out' \
  "the coordinator log kept its first run across the requeue (--open-mode=append)"
echo "slurm box: sweep with a USR2 preemption and a coordinator requeue finished in ${elapsed} s"
