#!/usr/bin/env bash
# A one-node Slurm on loopback ("Slurm in a box") for trying deploy/slurm/ on a
# workstation: Debian's slurm-wlm and munge, a generated slurm.conf with node
# "localhost" and partition "debug", daemons started with their own state folder
# and stopped by the PIDs they recorded (never by name).
#   deploy/slurm/box.sh start     # installs the packages when missing (root, apt)
#   deploy/slurm/box.sh status
#   deploy/slurm/box.sh stop
# Environment: XMOD_SLURM_BOX (state folder, default /tmp/xmod-slurm-box);
# XMOD_SLURM_REQUEUE_HOLD (seconds a requeued job waits before it may start again,
# Slurm's AuthInfo cred_expire: default 120 as in Slurm; the tests shorten it).
# While it runs, sbatch/squeue/scontrol use it through SLURM_CONF (printed by start).
set -euo pipefail

box="${XMOD_SLURM_BOX:-/tmp/xmod-slurm-box}"
mkdir -p "$box"
box=$(cd "$box" && pwd)  # the daemons change directory: every path they get is absolute
conf="$box/slurm.conf"
say() { echo "slurm-box: $*" >&2; }
fail() {
  say "$*"
  exit 1
}
# Slurm cannot be had here (not root, no apt, apt failed): exit 77, which callers
# read as "skip", unlike a box that was installed but did not start (exit 1).
unavailable() {
  say "$*"
  exit 77
}

pid_alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

install_packages() {
  local missing=()
  for tool in slurmctld slurmd munged sbatch; do
    command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  [ "$(id -u)" -eq 0 ] || unavailable "missing ${missing[*]}; install slurm-wlm and munge (needs root)"
  command -v apt-get >/dev/null 2>&1 || unavailable "missing ${missing[*]} and no apt-get to install them"
  say "installing slurm-wlm and munge (missing: ${missing[*]})"
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
    slurm-wlm slurmctld slurmd slurm-client slurm-wlm-basic-plugins munge >"$box/apt.log" 2>&1 ||
    unavailable "apt-get install slurm-wlm munge failed; see $box/apt.log"
}

write_config() {
  local cpus memory
  cpus=$(nproc)
  memory=$(slurmd -C 2>/dev/null | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p')
  [ -n "$memory" ] || memory=$(($(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024))
  cat >"$conf" <<EOF
ClusterName=xmodbox
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
SlurmctldPort=${XMOD_SLURM_PORT:-6817}
SlurmdPort=$((${XMOD_SLURM_PORT:-6817} + 1))
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$box/munge/munge.socket,cred_expire=${XMOD_SLURM_REQUEUE_HOLD:-120}
StateSaveLocation=$box/spool/ctld
SlurmdSpoolDir=$box/spool/d
TmpFS=$box/tmp
SlurmctldPidFile=$box/run/slurmctld.pid
SlurmdPidFile=$box/run/slurmd.pid
SlurmctldLogFile=$box/log/slurmctld.log
SlurmdLogFile=$box/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MailProg=/bin/true
MpiDefault=none
ReturnToService=2
SlurmctldTimeout=60
SlurmdTimeout=120
InactiveLimit=0
KillWait=30
MinJobAge=600
NodeName=localhost NodeHostname=localhost NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$memory State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP DefMemPerCPU=$((memory / cpus))
EOF
}

start() {
  mkdir -p "$box"/{munge,spool/ctld,spool/d,run,log}
  # Job and step ids restart at 1 with a fresh state; step folders a previous box
  # left (PMIx's per-step directories live under TmpFS) would collide.
  rm -rf "$box/tmp"
  mkdir -p "$box/tmp"
  install_packages
  if pid_alive "$box/run/slurmctld.pid" && pid_alive "$box/run/slurmd.pid"; then
    say "already running (SLURM_CONF=$conf)"
    echo "export SLURM_CONF=$conf"
    return 0
  fi
  write_config
  if [ ! -s "$box/munge/munge.key" ]; then
    (umask 077; dd if=/dev/urandom of="$box/munge/munge.key" bs=1024 count=1 2>/dev/null)
  fi
  chmod 700 "$box/munge"
  if ! pid_alive "$box/run/munged.pid"; then
    munged --force --key-file="$box/munge/munge.key" --socket="$box/munge/munge.socket" \
      --pid-file="$box/run/munged.pid" --log-file="$box/log/munged.log" \
      --seed-file="$box/munge/munged.seed" ||
      fail "munged did not start; see $box/log/munged.log"
  fi
  export SLURM_CONF="$conf"
  slurmctld -f "$conf" || fail "slurmctld did not start; see $box/log/slurmctld.log"
  slurmd -f "$conf" -N localhost || fail "slurmd did not start; see $box/log/slurmd.log"
  local deadline=$((SECONDS + 60))
  until sinfo -h -n localhost -o %T 2>/dev/null | grep -Eq '^(idle|mixed|allocated)'; do
    [ "$SECONDS" -lt "$deadline" ] || fail "node localhost not idle after 60 s; see $box/log/"
    sleep 1
  done
  say "running: partition debug, node localhost ($(nproc) CPUs); state in $box"
  echo "export SLURM_CONF=$conf"
}

stop() {
  local name pid waited
  # The box's jobs first: slurmd stopping does not end the steps it started.
  if pid_alive "$box/run/slurmctld.pid"; then
    SLURM_CONF="$conf" scancel --full --user="$(id -un)" 2>/dev/null || true
    waited=0
    while [ -n "$(SLURM_CONF="$conf" squeue -h -t RUNNING,COMPLETING -o %i 2>/dev/null)" ] &&
      [ "$waited" -lt 60 ]; do
      sleep 1
      waited=$((waited + 1))
    done
  fi
  stop_daemons
  # What outlived its job: a step whose slurmstepd lost its slurmd, and the
  # processes it started. They carry this box's SLURM_CONF in their environment
  # (slurmd was started with it) and are a slurmstepd or part of a job
  # (SLURM_JOB_ID); the caller's own shell has the first but neither of the others.
  local leftovers=() proc env
  for proc in /proc/[0-9]*; do
    pid=${proc#/proc/}
    [ "$pid" = $$ ] && continue
    env=$(tr '\0' '\n' 2>/dev/null <"$proc/environ") || continue
    grep -qxF "SLURM_CONF=$conf" <<<"$env" || continue
    if [ "$(cat "$proc/comm" 2>/dev/null)" = slurmstepd ] || grep -q '^SLURM_JOB_ID=' <<<"$env"; then
      leftovers+=("$pid")
    fi
  done
  if [ ${#leftovers[@]} -gt 0 ]; then
    say "killing ${#leftovers[@]} process(es) left by the box's jobs: ${leftovers[*]}"
    kill -KILL "${leftovers[@]}" 2>/dev/null || true
  fi
  say "stopped"
}

stop_daemons() {
  local name pid waited
  for name in slurmd slurmctld munged; do
    [ -s "$box/run/$name.pid" ] || continue
    pid=$(cat "$box/run/$name.pid")
    if kill -0 "$pid" 2>/dev/null; then
      kill -TERM "$pid" 2>/dev/null || true
      waited=0
      while kill -0 "$pid" 2>/dev/null && [ "$waited" -lt 30 ]; do
        sleep 1
        waited=$((waited + 1))
      done
      kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$box/run/$name.pid"
  done
}

status() {
  local name
  for name in munged slurmctld slurmd; do
    if pid_alive "$box/run/$name.pid"; then
      echo "$name: running (pid $(cat "$box/run/$name.pid"))"
    else
      echo "$name: not running"
    fi
  done
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *)
    echo "usage: $0 start|stop|status" >&2
    exit 2
    ;;
esac
