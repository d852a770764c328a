#!/usr/bin/env bash
# Stop the llama-server that start.sh started, by the PID it wrote: SIGTERM, then SIGKILL after
# 10 s. Idempotent: a missing or dead PID is not an error.
#
#   e2e/llama/stop.sh STATE_DIR
set -euo pipefail
STATE=${1:?usage: stop.sh STATE_DIR}
[ -s "$STATE/pid" ] || { echo "stop.sh: no pid file in $STATE" >&2; exit 0; }
PID=$(cat "$STATE/pid")
# Only signal the process if it is still the llama-server we started.
if kill -0 "$PID" 2>/dev/null && grep -q llama-server "/proc/$PID/cmdline" 2>/dev/null; then
  kill -TERM "$PID"
  for _ in $(seq 50); do
    kill -0 "$PID" 2>/dev/null || break
    sleep 0.2
  done
  if kill -0 "$PID" 2>/dev/null; then
    echo "stop.sh: pid $PID ignored SIGTERM; sending SIGKILL" >&2
    kill -KILL "$PID" 2>/dev/null || true
  fi
fi
rm -f "$STATE/pid"
echo "stop.sh: stopped pid $PID" >&2
