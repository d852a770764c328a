#!/usr/bin/env bash
# Refit and re-predict finished fidelity runs offline: for each result directory of
# e2e/fidelity.sh, calibrate again from its calibration runs (with the calibration servers'
# logs, or without them: LOGS=0), predict every trace again with the new config and print the
# fidelity table against the same real runs. No server is started; a run takes about a second.
#
#   bash e2e/refit.sh OUT DIR...        results in OUT/<basename of DIR>/ (distinct basenames)
#
# Environment: LOGS (1: kvsim calibrate --server-log, the default; 0: the copy rates fitted
# with the prompt call, as before session 5), REQUEST_DELAY (800us), SEND_GAP (5ms), NP (4),
# TRACES ("chat shared warm shared-shuffled", those present), BASE (configs/llamacpp/tiny.toml:
# the server arguments), UNGATED ("shared-shuffled"), CALIBRATE_FLAGS (more kvsim calibrate
# flags, e.g. --no-after-prompt; split on spaces). REQUEST_DELAY, SEND_GAP and NP must be
# the finished runs' own (e2e/fidelity.sh's defaults are these). A directory without
# calibration runs (one run with CONFIG=) or, with LOGS=1, without their servers' logs is
# skipped with a warning. docs/fidelity.md, item 10 of "What the remaining error is", compares
# LOGS=1 with LOGS=0 over runs 20-41.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: bash e2e/refit.sh OUT DIR..." >&2; exit 2; }
abs() { case $1 in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
OUT=$(abs "$1")
shift
DIRS=()
for d in "$@"; do DIRS+=("$(abs "$d")"); done
cd "$(dirname "$0")/.."

. e2e/lib.sh
LOGS=${LOGS:-1}
REQUEST_DELAY=${REQUEST_DELAY:-800us}
SEND_GAP=${SEND_GAP:-5ms}
NP=${NP:-4}
TRACES=${TRACES:-"chat shared warm shared-shuffled"}
BASE=${BASE:-configs/llamacpp/tiny.toml}
mkdir -p "$OUT"
e2e_build "$OUT"
concs=(1)
[ "$NP" = 1 ] || concs+=("$NP")
for d in "${DIRS[@]}"; do
  o=$OUT/$(basename "$d")
  cal=()
  missing=""
  for f in "$d"/cal-run*.jsonl; do
    [ -e "$f" ] || { missing="no cal-run*.jsonl"; break; }
    i=${f##*/cal-run}
    i=${i%.jsonl}
    cal+=(--per-request "$f")
    if [ "$LOGS" = 1 ]; then
      [ -e "$d/server-cal$i/server.log" ] || { missing="no server-cal$i/server.log (LOGS=0 refits without the logs)"; break; }
      cal+=(--server-log "$d/server-cal$i/server.log")
    fi
  done
  if [ -n "$missing" ]; then
    echo "e2e/refit: skipping $d: $missing" >&2
    continue
  fi
  mkdir -p "$o"
  # shellcheck disable=SC2086 # CALIBRATE_FLAGS are words
  "$KV" calibrate --config "$BASE" "${cal[@]}" --request-delay "$REQUEST_DELAY" ${CALIBRATE_FLAGS:-} --out "$o/calibrated.toml" >"$o/calibrate.txt"
  runs=()
  for t in $TRACES; do
    [ -e "$d/$t.jsonl" ] || continue
    for c in "${concs[@]}"; do
      measured=()
      for r in "$d/$t-c$c".real*.jsonl; do [ -e "$r" ] && measured+=(--measured "$r"); done
      [ ${#measured[@]} -gt 0 ] || continue
      "$KV" replay --trace "$d/$t.jsonl" --target sim --config "$o/calibrated.toml" --max-concurrency "$c" \
        --send-gap "$SEND_GAP" --vocab 1:256 --per-request "$o/$t-c$c.predicted.jsonl" --json >/dev/null
      "$KV" compare "${measured[@]}" --predicted "$o/$t-c$c.predicted.jsonl" \
        --max-ttft-mape 1e9 --max-hit-rate-pp 100 --json >"$o/$t-c$c.json"
      runs+=("$o/$t-c$c.json")
    done
  done
  echo "== $d (LOGS=$LOGS): $o"
  "$OUT/fidelity" table -ungated "${UNGATED:-shared-shuffled}" "${runs[@]}" | tee "$o/table.txt" || true
done
