#!/usr/bin/env bash
# `make e2e-slurm` (root; CI runs it after `make e2e-real`): run a kvsim study on a real, private,
# one-node Slurm cluster started here, with deploy/slurm/submit.sh, and check that the merged
# results.jsonl, results.csv and report.md are byte-identical to a single-machine run; then
# submit the array again, fail one task on purpose (scancel once it has finished a point), check
# that the merge does not run, resubmit that task alone, and check that it resumed and that the
# merge is byte-identical again.
#
# It installs slurm-wlm and munge from Debian when they are missing; when the mirror cannot
# provide them it prints a loud SKIPPED banner and exits 0 (as e2e/run.sh does for llama.cpp).
# Everything else lives in $KVSIM_SLURM_STATE (STATE below, default /tmp/kvsim-e2e-slurm):
# slurm.conf (SLURM_CONF points the daemons and the clients at it, /etc/slurm is not read), a
# munge key and socket, the daemons' state, logs and PIDs, the study outputs. The daemons it starts (munged, slurmctld,
# slurmd) are stopped by PID on exit, after their jobs are cancelled, whatever the exit; a run
# killed with SIGKILL leaves their PIDs in $STATE/pids, and the next run stops those processes
# (only if their command line still names $STATE) and their jobs before it starts. $STATE is
# removed at the end unless KEEP=1.
#
# Env: KVSIM_SLURM_STATE, KVSIM_SLURM_TIMEOUT (seconds for each submission to finish, default
# 600), KVSIM_SLURM_STUDY (default configs/studies/default.toml), KVSIM_SLURM_SHARDS (default
# 4, at least 2), KEEP.
set -uo pipefail
cd "$(dirname "$0")/../.."
REPO=$(pwd)
STATE=${KVSIM_SLURM_STATE:-/tmp/kvsim-e2e-slurm}
TIMEOUT=${KVSIM_SLURM_TIMEOUT:-600}
STUDY=${KVSIM_SLURM_STUDY:-configs/studies/default.toml}
SHARDS=${KVSIM_SLURM_SHARDS:-4}
KVSIM=$REPO/bin/kvsim
PART=e2e

say() { echo "e2e-slurm: $*" >&2; }
die() {
  say "FAILED: $*"
  exit 1
}
skip() {
  {
    echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"
    echo "e2e-slurm: SKIPPED the Slurm end-to-end check: $*"
    echo "e2e-slurm: Nothing was run on Slurm."
    echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"
  } >&2
  exit 0
}

case $STATE in /?*/?*) ;; *) die "KVSIM_SLURM_STATE must be an absolute path two levels deep at least (it is removed), got '$STATE'" ;; esac
[[ $SHARDS =~ ^[0-9]+$ ]] && [ "$SHARDS" -ge 2 ] || die "KVSIM_SLURM_SHARDS: want an integer >= 2, got '$SHARDS'"
[ "$(id -u)" = 0 ] || die "run as root (it installs packages and starts slurmd, which runs jobs as their user)"

# --- packages ---------------------------------------------------------------------------------
missing=()
for b in munged mungekey slurmctld slurmd sbatch squeue scontrol scancel; do
  command -v "$b" >/dev/null 2>&1 || missing+=("$b")
done
if [ ${#missing[@]} -gt 0 ]; then
  say "installing slurm-wlm and munge from Debian (missing: ${missing[*]})"
  # The packages' scripts would start the system's munged, slurmctld and slurmd; a policy-rc.d
  # that denies every start (removed again below, and only if it was not there) prevents that.
  policy=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    policy=/usr/sbin/policy-rc.d
    printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy"
  fi
  log=$(mktemp)
  rc=0
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
    --no-install-recommends slurm-wlm munge; } >"$log" 2>&1 || rc=$?
  [ -z "$policy" ] || rm -f "$policy"
  if [ "$rc" != 0 ]; then
    tail -n 20 "$log" >&2
    rm -f "$log"
    skip "the Debian mirror cannot provide slurm-wlm and munge (apt-get exit $rc, above)"
  fi
  rm -f "$log"
  for b in "${missing[@]}"; do
    command -v "$b" >/dev/null 2>&1 || die "$b is still missing after installing slurm-wlm and munge"
  done
fi

# --- a previous run killed before its trap ran --------------------------------------------------
# pids holds "PID NAME" lines. A process is stopped only if it is alive and its command line
# still names $STATE (every daemon is started with a path under it), so a recycled PID is left
# alone. The jobs of a cluster whose slurmctld is still up are cancelled first; slurmstepd
# processes left behind (they leave slurmd's process tree) are found by the SLURM_CONF they
# inherit from our slurmd, and stopped with the job's processes under them.
tree() { # PID and its descendants, children first
  local c
  for c in $(ps -o pid= --ppid "$1" 2>/dev/null); do tree "$c"; done
  echo "$1"
}
ours() { [ -r "/proc/$1/cmdline" ] && tr '\0' ' ' <"/proc/$1/cmdline" | grep -qF "$STATE/"; }
stop_tree() { # PID NAME: SIGTERM to it and its descendants, SIGKILL after 10 s
  local pid=$1 name=$2 procs i
  procs=$(tree "$pid")
  say "stopping $name (PID $pid)"
  kill -TERM $procs 2>/dev/null
  for ((i = 0; i < 100; i++)); do
    kill -0 $procs 2>/dev/null || return 0
    sleep 0.1
  done
  say "$name (PID $pid) ignored SIGTERM for 10 s: SIGKILL"
  kill -KILL $procs 2>/dev/null
  return 0
}
stepds() { # the slurmstepd processes that our slurmd started
  local d
  for d in /proc/[0-9]*; do
    [ "$(head -c 10 "$d/cmdline" 2>/dev/null | tr -d '\0')" = slurmstepd ] || continue
    tr '\0' '\n' <"$d/environ" 2>/dev/null | grep -qxF "SLURM_CONF=$STATE/slurm.conf" && echo "${d#/proc/}"
  done
}
cancel_all() { # cancels every job of our cluster and waits at most 30 s for them to end
  local ids i
  ids=$(SLURM_CONF=$STATE/slurm.conf squeue -h -o %A 2>/dev/null | sort -u | paste -sd,)
  [ -n "$ids" ] || return 0
  say "cancelling jobs $ids"
  SLURM_CONF=$STATE/slurm.conf scancel ${ids//,/ } 2>/dev/null
  for ((i = 0; i < 150; i++)); do
    [ -z "$(SLURM_CONF=$STATE/slurm.conf squeue -h 2>/dev/null)" ] && return 0
    sleep 0.2
  done
}
stop_all() { # everything a run started, newest first
  local pid name
  if [ -f "$STATE/pids" ]; then
    pid=$(awk '$2 == "slurmctld" { print $1 }' "$STATE/pids")
    [ -z "$pid" ] || ! ours "$pid" || cancel_all
    while read -r pid name; do
      ! ours "$pid" || stop_tree "$pid" "$name"
    done < <(tac "$STATE/pids")
    rm -f "$STATE/pids"
  fi
  for pid in $(stepds); do stop_tree "$pid" "a left-over slurmstepd"; done
}
if [ -d "$STATE" ]; then
  say "a previous run left $STATE: stopping what it started"
  stop_all
fi
rm -rf "$STATE"
mkdir -p "$STATE" && chmod 700 "$STATE"

# --- cleanup on every exit ----------------------------------------------------------------------
export SLURM_CONF=$STATE/slurm.conf
JOBS=() # every job id submitted, for show_state
cleanup() {
  local rc=$?
  trap - EXIT INT TERM HUP
  stop_all
  if [ "${KEEP:-0}" = 1 ]; then
    say "KEEP=1: leaving $STATE"
  else
    rm -rf "$STATE"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

# --- build ---------------------------------------------------------------------------------------
say "building bin/kvsim"
make --no-print-directory build >&2 || die "make build"

# --- slurm.conf and munge -----------------------------------------------------------------------
free_port_pair() { # the first P >= $1 such that P and P+1 have no listening TCP socket
  local used p
  used=$(awk 'NR > 1 && $4 == "0A" { n = split($2, a, ":"); print a[n] }' /proc/net/tcp /proc/net/tcp6 2>/dev/null |
    while read -r h; do echo $((16#$h)); done | sort -un)
  for ((p = $1; p < $1 + 200; p += 2)); do
    if ! grep -qx "$p" <<<"$used" && ! grep -qx "$((p + 1))" <<<"$used"; then
      echo "$p"
      return
    fi
  done
  return 1
}
host=$(hostname -s)
cpus=$(nproc)
mem_mb=$(awk '/^MemTotal:/ { print int($2 / 1024) }' /proc/meminfo)
port=$(free_port_pair 16817) || die "no free port pair in 16817-17016"
mkdir -p "$STATE/munge" "$STATE/ctld" "$STATE/spool" "$STATE/out"
chmod 700 "$STATE/munge"
cat >"$SLURM_CONF" <<EOF
# A private one-node cluster for e2e/slurm/run.sh; nothing outside $STATE is used.
ClusterName=kvsime2e
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$STATE/munge/munge.socket
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/spool
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$STATE/slurmctld.log
SlurmdLogFile=$STATE/slurmd.log
# No cgroups: processes are tracked through /proc, tasks are not bound.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$STATE/jobcomp.log
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
MpiDefault=none
ReturnToService=2
KillWait=10
MinJobAge=600
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=$PART Nodes=$host Default=YES MaxTime=30 State=UP
EOF
say "slurm.conf: $host, $cpus CPUs, ${mem_mb} MB, ports $port and $((port + 1)), state in $STATE"

mungekey --create --keyfile="$STATE/munge/munge.key" >/dev/null 2>&1 ||
  { dd if=/dev/urandom of="$STATE/munge/munge.key" bs=1024 count=1 status=none && chmod 400 "$STATE/munge/munge.key"; } ||
  die "cannot create a munge key"

start() { # NAME CMD...: start a daemon in the foreground, in the background; record its PID
  local name=$1
  shift
  "$@" >>"$STATE/$name.out" 2>&1 &
  echo "$! $name" >>"$STATE/pids"
  say "started $name (PID $!)"
}
alive() { # NAME: fail with its log if the daemon has exited
  local pid
  pid=$(awk -v n="$1" '$2 == n { print $1 }' "$STATE/pids")
  kill -0 "$pid" 2>/dev/null && return 0
  tail -n 30 "$STATE/$1.out" "$STATE/$1.log" 2>/dev/null >&2
  die "$1 (PID $pid) exited"
}
start munged munged --foreground --force --key-file="$STATE/munge/munge.key" \
  --socket="$STATE/munge/munge.socket" --pid-file="$STATE/munge/munged.pid" \
  --log-file="$STATE/munged.log" --seed-file="$STATE/munge/seed"
for ((i = 0; i < 50; i++)); do [ -S "$STATE/munge/munge.socket" ] && break; sleep 0.1; done
alive munged
munge -n --socket="$STATE/munge/munge.socket" | unmunge --socket="$STATE/munge/munge.socket" >/dev/null ||
  die "munge cannot encode and decode a credential"
start slurmctld slurmctld -D -c -f "$SLURM_CONF"
start slurmd slurmd -D -f "$SLURM_CONF" -N "$host"
for ((i = 0; ; i++)); do
  alive slurmctld
  alive slurmd
  state=$(sinfo -h -n "$host" -o %T 2>/dev/null)
  [ "$state" = idle ] && break
  [ "$i" -lt 300 ] || { scontrol show node "$host" >&2; die "node $host is '$state', not idle, after 60 s"; }
  sleep 0.2
done
say "node $host is idle"

# --- helpers ------------------------------------------------------------------------------------
show_state() { # the cluster's view of the jobs, and their logs
  say "squeue:"
  squeue -a -o '%.12i %.10P %.14j %.10T %.10M %.20R' >&2
  say "jobs (scontrol):"
  local j
  for j in "${JOBS[@]}"; do job_states "$j" >&2; done
  say "completed jobs (jobcomp):"
  cut -c1-200 "$STATE/jobcomp.log" >&2 2>/dev/null
  local f
  for f in "$STATE"/out/*/logs/*.out; do
    [ -f "$f" ] || continue
    say "--- $f"
    tail -n 20 "$f" >&2
  done
  say "--- slurmctld.log"
  tail -n 30 "$STATE/slurmctld.log" >&2
}
submit() { # OUT [submit.sh flags...]: prints "ARRAY MERGE"
  local out=$1
  shift
  deploy/slurm/submit.sh --study "$STUDY" --shards "$SHARDS" --out "$out" --partition "$PART" \
    --time 10 --cpus 1 --mem 1G --kvsim "$KVSIM" "$@"
}
wait_done() { # JOBID...: until none is queued or running, at most $TIMEOUT s
  local ids deadline=$((SECONDS + TIMEOUT))
  ids=$(IFS=,; echo "$*")
  while [ -n "$(squeue -h -j "$ids" 2>/dev/null)" ]; do
    alive slurmctld
    alive slurmd
    if [ "$SECONDS" -ge "$deadline" ]; then
      show_state
      die "jobs $ids still queued or running after ${TIMEOUT} s"
    fi
    sleep 1
  done
}
job_states() { # JOBID: "ID STATE exit=.. reason=.." per job (array tasks one by one)
  scontrol -o show job "$1" 2>/dev/null | awk '{
    for (i = 1; i <= NF; i++) { k = $i; sub(/=.*/, "", k); v[k] = substr($i, length(k) + 2) }
    id = ("ArrayTaskId" in v) ? v["ArrayJobId"] "_" v["ArrayTaskId"] : v["JobId"]
    print id, v["JobState"], "exit=" v["ExitCode"], "reason=" v["Reason"]
    split("", v)
  }'
}
expect_states() { # JOBID STATE: every job (task) of JOBID ended in STATE
  local bad
  bad=$(job_states "$1" | awk -v s="$2" '$2 != s')
  if [ -n "$bad" ] || [ -z "$(job_states "$1")" ]; then
    show_state
    die "job $1: want every task $2, got: ${bad:-no job}"
  fi
}
same_as_single() { # DIR: the merged study in DIR/merged is byte-identical to the single run
  local f
  for f in results.jsonl results.csv report.md; do
    cmp "$STATE/out/single/$f" "$1/merged/$f" >&2 || { show_state; die "$1/merged/$f differs from the single-machine run"; }
  done
  say "OK: $1/merged/{results.jsonl,results.csv,report.md} are byte-identical to the single-machine run"
}

# --- the reference: one machine, unsharded ------------------------------------------------------
say "single-machine run: kvsim study $STUDY --out $STATE/out/single --jobs $cpus"
t0=$SECONDS
"$KVSIM" study "$STUDY" --out "$STATE/out/single" --jobs "$cpus" >/dev/null &
echo "$! kvsim-single" >>"$STATE/pids" # stopped by the next run if this one is killed
wait $! || die "the single-machine run failed"
say "single-machine run took $((SECONDS - t0)) s"

# --- 1. the study as $SHARDS array tasks plus the merge ------------------------------------------
out=$STATE/out/slurm
t0=$SECONDS
read -r array merge < <(submit "$out") || die "submit.sh failed"
[ -n "${merge:-}" ] || die "submit.sh printed no job ids"
JOBS+=("$array" "$merge")
squeue -o '%.12i %.10P %.14j %.10T %.20R %E' >&2
wait_done "$array" "$merge"
expect_states "$array" COMPLETED
expect_states "$merge" COMPLETED
say "array $array and merge $merge completed in $((SECONDS - t0)) s"
job_states "$array" >&2
same_as_single "$out"

# --- 2. one task cancelled after its first point, the merge not run, the task resubmitted -------
# To keep this fast, the other shards start from run 1's finished folders (copied): their tasks
# run and find every point done ("resuming: ... points already in"), so only the victim's
# points are simulated again.
out=$STATE/out/fail
victim=1
vdir=$out/shard-$victim-of-$SHARDS
mkdir -p "$out"
for ((i = 0; i < SHARDS; i++)); do
  [ "$i" = "$victim" ] || cp -r "$STATE/out/slurm/shard-$i-of-$SHARDS" "$out/"
done
t0=$SECONDS
read -r array merge < <(submit "$out") || die "submit.sh failed"
[ -n "${merge:-}" ] || die "submit.sh printed no job ids"
JOBS+=("$array" "$merge")
deadline=$((SECONDS + TIMEOUT))
until [ -s "$vdir/results.jsonl" ]; do
  alive slurmctld
  alive slurmd
  [ "$SECONDS" -lt "$deadline" ] || { show_state; die "task ${array}_$victim wrote no result in ${TIMEOUT} s"; }
  sleep 0.2
done
vstate=$(job_states "${array}_$victim" | awk '{ print $2 }')
[ "$vstate" = RUNNING ] || { show_state; die "task ${array}_$victim is $vstate after its first point, want RUNNING (the shard has too few points to cancel one mid-way?)"; }
say "task ${array}_$victim finished a point ($(wc -l <"$vdir/results.jsonl") line in results.jsonl): scancel ${array}_$victim"
scancel "${array}_$victim"
wait_done "$array" "$merge"
job_states "$array" >&2
[ "$(job_states "${array}_$victim" | awk '{ print $2 }')" = CANCELLED ] || { show_state; die "task ${array}_$victim was not CANCELLED"; }
mstate=$(job_states "$merge" | awk '{ print $2 }')
[ "$mstate" != COMPLETED ] || { show_state; die "the merge job ran although task ${array}_$victim was cancelled"; }
[ ! -e "$out/merged" ] || die "$out/merged exists although the merge should not have run"
say "OK: task ${array}_$victim CANCELLED; the merge did not run: $(job_states "$merge")"
for ((i = 0; i < SHARDS; i++)); do
  [ "$i" = "$victim" ] && continue
  grep -q "resuming: " "$out/logs/kvsim-study-${array}_$i.out" || die "task ${array}_$i did not resume from its copied folder"
done
done_before=$(wc -l <"$vdir/results.jsonl")

read -r array2 merge2 < <(submit "$out" --tasks "$victim") || die "submit.sh --tasks $victim failed"
[ -n "${merge2:-}" ] || die "submit.sh printed no job ids"
JOBS+=("$array2" "$merge2")
wait_done "$array2" "$merge2"
expect_states "$array2" COMPLETED
expect_states "$merge2" COMPLETED
log=$out/logs/kvsim-study-${array2}_$victim.out
grep -q "resuming: $done_before points already in" "$log" || { show_state; die "the resubmitted task did not resume from the $done_before points of the cancelled one ($log)"; }
say "resubmitted task ${array2}_$victim resumed: $(grep -o 'resuming: .*' "$log")"
say "cancel, resubmit and merge took $((SECONDS - t0)) s"
same_as_single "$out"

say "PASSED in $SECONDS s"
