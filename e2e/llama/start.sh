#!/usr/bin/env bash
# Start llama.cpp's llama-server from the chroot that setup.sh made, on 127.0.0.1 and a free
# port, and wait (bounded) until /health answers. Prints the base URL on stdout.
#
#   e2e/llama/start.sh [-m MODEL] [-d STATE_DIR] [-- EXTRA LLAMA-SERVER FLAGS...]
#
#   -m MODEL       model file name in $ROOT/models (default tiny.gguf)
#   -d STATE_DIR   where to write pid, port, url and server.log (default: a new mktemp dir)
#   env NP         slots, -np (default 4)
#   env CTX        total context, -c (default 8192; each slot gets CTX/NP without --kv-unified)
#   env THREADS    -t (default 2)
#   env TIMEOUT    seconds to wait for /health (default 60)
#   env KVSIM_LLAMA_ROOT  the chroot (default /opt/kvsim-llama)
#
# The port is chosen by the server itself (--port 0, read back from its "listening on" line),
# so two servers never race for one port. Stop it with e2e/llama/stop.sh STATE_DIR.
set -euo pipefail
ROOT=${KVSIM_LLAMA_ROOT:-/opt/kvsim-llama}
NP=${NP:-4}
CTX=${CTX:-8192}
THREADS=${THREADS:-2}
TIMEOUT=${TIMEOUT:-60}
MODEL=tiny.gguf
STATE=
while [ $# -gt 0 ]; do
  case "$1" in
    -m) MODEL=$2; shift 2 ;;
    -d) STATE=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "start.sh: unknown argument $1 (extra server flags go after --)" >&2; exit 2 ;;
  esac
done
[ -x "$ROOT/usr/bin/llama-server" ] || { echo "start.sh: no llama-server in $ROOT: run e2e/llama/setup.sh" >&2; exit 1; }
[ -s "$ROOT/models/$MODEL" ] || { echo "start.sh: no model $ROOT/models/$MODEL: run e2e/llama/setup.sh" >&2; exit 1; }
[ -n "$STATE" ] || STATE=$(mktemp -d "${TMPDIR:-/tmp}/kvsim-llama.XXXXXX")
mkdir -p "$STATE"
LOG="$STATE/server.log"

# -lm none: no mmap (with mmap, decode speed was erratic on these machines).
# chroot execs llama-server, so $! is the server's own PID.
chroot "$ROOT" llama-server -m "/models/$MODEL" --host 127.0.0.1 --port 0 \
  -c "$CTX" -np "$NP" -t "$THREADS" -lm none --no-webui --metrics "$@" >"$LOG" 2>&1 </dev/null &
PID=$!
echo "$PID" >"$STATE/pid"

fail() {
  echo "start.sh: $*; last lines of $LOG:" >&2
  tail -20 "$LOG" >&2 || true
  kill "$PID" 2>/dev/null || true
  exit 1
}

deadline=$((SECONDS + TIMEOUT))
PORT=
while [ -z "$PORT" ]; do
  kill -0 "$PID" 2>/dev/null || fail "llama-server (pid $PID) exited"
  [ $SECONDS -lt $deadline ] || fail "no 'listening on' line within ${TIMEOUT}s"
  PORT=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$LOG" 2>/dev/null | head -1 | grep -o '[0-9]*$' || true)
  [ -n "$PORT" ] || sleep 0.2
done
URL="http://127.0.0.1:$PORT"
until curl -sf "$URL/health" >/dev/null 2>&1; do
  kill -0 "$PID" 2>/dev/null || fail "llama-server (pid $PID) exited"
  [ $SECONDS -lt $deadline ] || fail "/health not ok within ${TIMEOUT}s"
  sleep 0.2
done
echo "$PORT" >"$STATE/port"
echo "$URL" >"$STATE/url"
echo "start.sh: llama-server pid $PID at $URL (state in $STATE)" >&2
echo "$URL"
