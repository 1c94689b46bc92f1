#!/bin/sh
# mpijob-run: the launcher's command under elasticPolicy.mode Restart (docs/elastic.md, "Elastic without
# Horovod"). Written by the mpijob operator into the job's ConfigMap; POSIX sh and /proc only, so the user's
# image needs nothing of ours.
#
# Usage: mpijob-run -- COMMAND [ARG...]
#
# It runs COMMAND on the hosts the operator lists for the job and starts it again whenever that list
# changes: a scale-in at once, a regrow when the operator lets the new workers in (restart.minIntervalSeconds).
#   1. wait for a non-empty list, then until cluster DNS knows every listed host, at most SETTLE_SECONDS;
#      write the hostfile the MPI implementation reads by default ($MPIJOB_HOSTFILE) and export MPIJOB_RANKS (the sum of its slots) and MPIJOB_RUN (1, 2, ...);
#   2. run COMMAND; once a second compare the operator's list with the run's;
#   3. when it differs, send $MPIJOB_RESTART_SIGNAL to every mpirun/mpiexec of this container (they forward
#      it to the ranks: checkpoint and exit) and wait for COMMAND to end, until the soonest leaving worker's
#      deadline less MARGIN_SECONDS (else $MPIJOB_GRACE_SECONDS less it), then SIGTERM, then SIGKILL;
#   4. go to 1. COMMAND ending by itself ends this script with its exit status: a success is the job's
#      success, a crash its failure (counted against backoffLimit as ever); an ended run that was asked
#      to stop is never a failure, whatever its status.
set -u

# The files the operator's pod spec provides (overridable for tests).
LIST=${MPIJOB_RUN_LIST:-/etc/mpi-discovery/hosts}
LEAVING=${MPIJOB_RUN_LEAVING:-/etc/mpi-discovery/leaving}
CONFIG_LIST=${MPIJOB_RUN_CONFIG_LIST:-/etc/mpi/discovered_hosts}
HOSTFILE=${MPIJOB_HOSTFILE:-/etc/mpi-run/hostfile}
FORMAT=${MPIJOB_HOSTFILE_FORMAT:-openmpi}
SIGNAL=${MPIJOB_RESTART_SIGNAL:-USR1}
SIGNAL=${SIGNAL#SIG}
GRACE=${MPIJOB_GRACE_SECONDS:-30}
SETTLE_SECONDS=60
MARGIN_SECONDS=3

say() { echo "mpijob-run: $*" >&2; }

if [ "${1:-}" = "--" ]; then shift; fi
if [ "$#" -eq 0 ]; then
  say "usage: mpijob-run -- COMMAND [ARG...]"
  exit 2
fi

# The operator's list, as host:slots lines in a stable order: the projected annotation (follows within about
# a second), else the ConfigMap's copy while a new pod's annotation is not projected yet.
wanted() {
  source=$LIST
  [ -s "$source" ] || source=$CONFIG_LIST
  grep -v '^#' "$source" 2>/dev/null | grep ':' | sort
}

# The listed hosts cluster DNS knows (`getent`, glibc's; without it every host counts), in the same order.
# Not discover_hosts.sh: it needs python3, which an MPI image need not have.
resolved() {
  for line in $target; do
    if ! command -v getent >/dev/null 2>&1 || getent hosts "${line%:*}" >/dev/null 2>&1; then
      echo "$line"
    fi
  done
}

# The hosts to run on: a non-empty list, every host resolved or SETTLE_SECONDS spent waiting for DNS.
settle() {
  while :; do
    target=$(wanted)
    [ -n "$target" ] && break
    sleep 1
  done
  waited=0
  while :; do
    hosts=$(resolved)
    if [ -n "$hosts" ] && { [ "$hosts" = "$target" ] || [ "$waited" -ge "$SETTLE_SECONDS" ]; }; then
      return 0
    fi
    sleep 1
    waited=$((waited + 1))
    target=$(wanted)
  done
}

write_hostfile() {
  ranks=0
  : >"$HOSTFILE.tmp"
  for line in $hosts; do
    host=${line%:*}
    slots=${line##*:}
    ranks=$((ranks + slots))
    if [ "$FORMAT" = openmpi ]; then
      echo "$host slots=$slots" >>"$HOSTFILE.tmp"
    else
      echo "$host:$slots" >>"$HOSTFILE.tmp"
    fi
  done
  mv "$HOSTFILE.tmp" "$HOSTFILE"
}

# The MPI launchers among COMMAND's descendants (found by /proc's PPid lines: a shell between us and mpirun,
# `sh -c`, would not forward the signal).
launchers() {
  family=" $child "
  grew=1
  while [ "$grew" -eq 1 ]; do
    grew=0
    for dir in /proc/[0-9]*; do
      pid=${dir#/proc/}
      case $family in *" $pid "*) continue ;; esac
      ppid=""
      while read -r key value; do
        if [ "$key" = "PPid:" ]; then ppid=$value; break; fi
      done <"$dir/status" 2>/dev/null
      case $family in *" $ppid "*) family="$family$pid " grew=1 ;; esac
    done
  done
  for pid in $family; do
    case $(cat "/proc/$pid/comm" 2>/dev/null) in
      mpirun | mpiexec | mpiexec.hydra | orterun | prterun) echo "$pid" ;;
    esac
  done
}

# Seconds the run has to stop: the soonest leaving worker's deadline (GNU date reads RFC 3339), less a margin.
stop_budget() {
  now=$(date +%s)
  soonest=""
  stamps=$(grep -o '[0-9][0-9-]*T[0-9:.]*Z' "$LEAVING" 2>/dev/null)
  for stamp in $stamps; do
    at=$(date -d "$stamp" +%s 2>/dev/null) || continue
    if [ -z "$soonest" ] || [ "$at" -lt "$soonest" ]; then soonest=$at; fi
  done
  if [ -n "$soonest" ]; then budget=$((soonest - now - MARGIN_SECONDS)); else budget=$((GRACE - MARGIN_SECONDS)); fi
  [ "$budget" -ge 1 ] || budget=1
  echo "$budget"
}

# Asks the run to stop ($SIGNAL to the MPI launchers, or to COMMAND when it has none), then waits for it
# within the budget; SIGTERM and 5 s later SIGKILL after that.
stop_run() {
  budget=$(stop_budget)
  pids=$(launchers)
  say "the host list changed: sending SIG$SIGNAL to ${pids:-the command}, ${budget}s to checkpoint and exit"
  # shellcheck disable=SC2086 # one pid per word
  kill -s "$SIGNAL" ${pids:-$child} 2>/dev/null
  spent=0
  while kill -0 "$child" 2>/dev/null; do
    if [ "$spent" -eq "$budget" ]; then
      say "still running at the deadline: SIGTERM"
      # shellcheck disable=SC2046 # one pid per word
      kill -s TERM "$child" $(launchers) 2>/dev/null
    elif [ "$spent" -eq $((budget + 5)) ]; then
      # shellcheck disable=SC2046 # one pid per word
      kill -s KILL "$child" $(launchers) 2>/dev/null
    fi
    sleep 1
    spent=$((spent + 1))
  done
}

run=0
while :; do
  settle
  write_hostfile
  run=$((run + 1))
  MPIJOB_RANKS=$ranks
  MPIJOB_RUN=$run
  export MPIJOB_RANKS MPIJOB_RUN
  say "run $run on $(echo "$hosts" | wc -l) hosts, $ranks ranks"
  "$@" &
  child=$!
  asked=0
  while kill -0 "$child" 2>/dev/null; do
    sleep 1
    if [ "$(wanted)" != "$target" ]; then
      stop_run
      asked=1
      break
    fi
  done
  wait "$child"
  status=$?
  if [ "$asked" -eq 0 ]; then
    say "run $run ended with status $status"
    exit "$status"
  fi
  say "run $run stopped (status $status); starting again on the new host list"
done
