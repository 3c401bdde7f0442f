#!/bin/bash
# deploy/slurm/ on a real one-node Slurm (deploy/slurm/box.sh), as a user would run
# it: copies of the .sbatch files with only the site values changed (CPUs, array
# size, time), submit-sweep.sh over a small sweep, then three interruptions, each
# resumed without help: `scancel --signal=USR2` of a worker group and the shipped
# time-limit signal (--signal=B:USR2@120, with the group's limit brought near) end
# as preempted attempts that the next group resumes; `scontrol requeue` of the
# coordinator loses nothing: the group it leaves behind checkpoints, exits 75 and
# requeues itself after XMOD_UNREACHABLE_SECONDS, the coordinator comes back on its
# address (Slurm holds a requeued job for its cred_expire, 40 s in this box) and
# the sweep finishes. About 3 minutes; each wait is bounded (at most about 30 minutes in all). Exits 77
# (skipped) with the reason where Slurm cannot be installed or started, or with
# XMOD_SLURM_BOX_TEST=0.
# Usage: slurm_box_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src="$(cd "$1" && pwd)"
bin="$(cd "$2" && pwd)/bin"
work="$(cd "$2" && pwd)/slurm-box-test"
export XMOD_SLURM_BOX="$work/box"
# Slurm holds a requeued job for cred_expire seconds (120 by default). 40 keeps the
# coordinator away longer than a group waits for it (XMOD_UNREACHABLE_SECONDS
# below) and saves the test two minutes of waiting.
export XMOD_SLURM_REQUEUE_HOLD=40
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
if [ "$code" = 77 ]; then
  echo "SKIPPED: Slurm could not be installed here: $(tail -n 1 "$work/box-start.log")"
  exit 77
fi
if [ "$code" != 0 ]; then
  echo "FAILED: the Slurm box did not start (exit $code):" >&2
  cat "$work/box-start.log" >&2
  tail -n 20 "$XMOD_SLURM_BOX"/log/*.log >&2 2>/dev/null
  bash "$src/deploy/slurm/box.sh" stop || true
  exit 1
fi
eval "$started"  # SLURM_CONF
trap 'bash "$src/deploy/slurm/box.sh" stop' EXIT

# The site values a user sets for this node: one CPU for the coordinator, one
# rank on one CPU per group, four groups (one runs at a time), short limits.
sed -e 's/^#SBATCH --cpus-per-task=.*/#SBATCH --cpus-per-task=1/' \
  -e 's/^#SBATCH --time=.*/#SBATCH --time=00:20:00/' \
  -e 's/^#SBATCH --mem=.*/#SBATCH --mem=2G/' \
  "$src/deploy/slurm/coordinator.sbatch" >"$work/site/coordinator.sbatch"
sed -e 's/^#SBATCH --array=.*/#SBATCH --array=0-3/' \
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

# A sweep long enough to interrupt three times: tests/fixtures/long.yaml's one job
# at 1,000 steps, checkpointed every 10. A one-CPU group trains about 4 steps a
# second here, so about 300 steps go by before the third interruption.
sed -e 's/^name: .*/name: slurmbox/' -e 's/^  tokens: .*/  tokens: 2048000/' \
  "$src/tests/fixtures/long.yaml" >"$work/sweep.yaml"

# XMOD_HOST: the name workers dial; a minimal machine may not resolve its hostname.
# XMOD_WAIT_SECONDS: how long a group waits for the address file, longer than a
# requeued coordinator is held; XMOD_UNREACHABLE_SECONDS: a group leaves after 20 s
# without its coordinator (the coordinator is held for 40).
export XMOD_BIN="$bin" XMOD_RUN_DIR="$work/run" XMOD_WAIT_SECONDS=400 XMOD_HOST=127.0.0.1 \
  XMOD_UNREACHABLE_SECONDS=20
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

running_group() {  # the running worker group's job id (array task), if any
  squeue -h -t RUNNING -n xmod-workers -o %i | head -n 1
}
attempts() { sqlite_count "SELECT COUNT(*) FROM attempts"; }
wait_for() {  # SECONDS CONDITION WHAT
  local deadline=$((SECONDS + $1))
  until eval "$2"; do
    check '[ $SECONDS -lt $deadline ]' "$3 (within $1 s)"
    sleep 1
  done
}

# 1. A preemption: USR2 to the running worker group once it has a checkpoint.
wait_for 300 'compgen -G "$XMOD_RUN_DIR/runs/*/checkpoints/*" >/dev/null' "a first checkpoint"
group_a=$(running_group)
check '[ -n "$group_a" ]' "no running worker group"
# scancel --signal exits 1 here even when every step got the signal (Slurm
# 22.05); what counts is what follows, checked below.
scancel --signal=USR2 "$group_a" || echo "scancel --signal=USR2 $group_a exited $?"
wait_for 150 '[ "$(attempts)" -ge 2 ]' "a second attempt after the USR2 to group $group_a"

# 2. The time limit: the next group's limit is brought within the shipped
# --signal=B:USR2@120, so Slurm signals it (slurmctld checks every 30 s) before the
# limit ends it; it checkpoints and ends as preempted, and a third group resumes.
wait_for 60 '[ -n "$(running_group)" ] && [ "$(running_group)" != "$group_a" ]' "a second running group"
group_b=$(running_group)
ran=$(squeue -h -j "$group_b" -o %M | awk -F: '{s = 0; for (i = 1; i <= NF; i++) s = s * 60 + $i; print s}')
limit=$(((ran + 120) / 60))  # minutes: between 60 and 120 s left
scontrol update JobId="$group_b" TimeLimit="$limit"
wait_for 200 '[ "$(attempts)" -ge 3 ]' "a third attempt after group $group_b's time limit came near"
check '[ "$(sqlite_count "SELECT COUNT(*) FROM attempts WHERE status = '"'"'preempted'"'"'")" -ge 2 ]' \
  "the USR2 and the time-limit signal each ended an attempt as preempted"

# 3. A coordinator requeue while the third group trains. The requeued job waits
# in the queue (held XMOD_SLURM_REQUEUE_HOLD seconds); the group, silent
# for XMOD_UNREACHABLE_SECONDS, checkpoints, exits 75 and requeues itself.
check '[ "$(sqlite_count "SELECT COUNT(*) FROM jobs WHERE status = '"'"'succeeded'"'"'")" = 0 ]' \
  "the job finished before the coordinator requeue: this machine trains faster than the sweep's length assumes; raise its tokens"
coord=$(squeue -h -n xmod-coordinator -o %i | head -n 1)
metrics_before=$(sqlite_count "SELECT COUNT(*) FROM metrics")
scontrol requeue "$coord"
wait_for 200 'grep -q "requeueing this group" "$work"/site/xmod-workers-*.out' \
  "a group that lost its coordinator freed its allocation and requeued itself"
wait_for 400 '[ -s "$XMOD_RUN_DIR/coordinator.addr" ] && status | grep -q slurmbox' \
  "the requeued coordinator back"
check '[ "$(cat "$XMOD_RUN_DIR/coordinator.addr")" = "$addr" ]' \
  "the requeued coordinator came back on another address: $(cat "$XMOD_RUN_DIR/coordinator.addr") (was $addr)"
check '[ "$(sqlite_count "SELECT COUNT(*) FROM metrics")" -ge "$metrics_before" ]' \
  "the requeue lost metric rows"

wait_for 600 'status | grep -q "slurmbox" && ! status | awk '"'"'$1 == "slurmbox" {exit !($2 + $3 + $4 > 0)}'"'"'' \
  "the sweep finished: $(status)"
elapsed=$((SECONDS - start))
scancel -n xmod-coordinator
sleep 3

count() { sqlite_count "$1"; }
check '[ "$(count "SELECT COUNT(*) FROM jobs WHERE status = '"'"'succeeded'"'"'")" = "$(count "SELECT COUNT(*) FROM jobs")" ]' \
  "every job succeeded"
check '[ "$(count "SELECT COUNT(*) FROM attempts WHERE status = '"'"'preempted'"'"'")" -ge 2 ]' \
  "the USR2 and the time-limit signal ended as preempted attempts"
check '[ "$(count "SELECT COUNT(*) FROM attempts WHERE resumed_from_step > 0")" -ge 1 ]' \
  "a later attempt resumed from the preempted one's checkpoint"
check 'grep -q "preempted at step" "$work"/site/xmod-workers-*.out' "the group log says it was preempted"
check 'grep -q " 1 LibTorch threads per rank (SLURM_CPUS_PER_TASK=1" "$work"/site/xmod-workers-*.out' \
  "each rank runs the threads of its allocation (--cpus-per-task=1), not one per CPU of the node"
check '[ "$(count "SELECT SUM(failures) FROM jobs")" = 0 ]' \
  "no interruption counted against the job (the lease lost in the coordinator's outage ends as preempted)"
check '[ "$(count "SELECT COUNT(*) FROM metrics WHERE name = '"'"'train_loss'"'"'")" = "$(count "SELECT SUM(steps) FROM jobs")" ]' \
  "every step has exactly one train_loss row (no hole, no double across the interruptions)"
check 'grep -q "restart 0" "$work"/site/xmod-coordinator-*.out && grep -q "restart 1" "$work"/site/xmod-coordinator-*.out' \
  "the coordinator log kept its first run across the requeue (--open-mode=append)"
echo "slurm box: sweep with a USR2 preemption, a time-limit signal and a coordinator requeue (a group requeued itself) finished in ${elapsed} s"
