#!/usr/bin/env bash
# nginx (the Debian package) as a real load balancer in front of two real llama-servers, against
# kvsim's fleet model with the matching router policy (issue 21; docs/fidelity.md, "Two servers
# behind nginx"):
#
#   e2e/nginx.sh [OUT_DIR]        # 4 to 15 minutes on a 2-vCPU machine, by its load
#
# 0. Routing alone, no llama-server: an nginx whose upstream servers answer with their own name;
#    2,000 requests through `hash $http_x_session_id consistent` (every seventh without the
#    header) and 300 through round robin, each answer checked against kvsim's router
#    (fidelity route). Exact or fail.
# 1. For each upstream config, round robin (router.policy nginx_round_robin) and
#    `hash $http_x_session_id consistent` (nginx_hash), and each concurrency, 1 and the slot count
#    (2 x NP): two fresh llama-servers (-t THREADS, -np NP), a fresh nginx in front of them
#    (worker_processes 1: one round-robin state, as kvsim's one router; proxy_buffering off and
#    HTTP/1.1 upstream so that the SSE stream passes through as it comes), a trace replayed
#    through nginx (kvsim replay sends each record's session as X-Session-Id), then everything
#    stopped by its PID. At concurrency 1 the trace is 6 documents x 5 questions; at the slot
#    count 3 documents x 32 questions, each document's next question sent when its previous
#    answer has come (the trace's comment below says why its hit rate does not depend on timing).
# 2. kvsim sim --config FLEET.toml: the llama-server config calibrated on two servers at once
#    (step 0b; or CONFIG) with two replicas
#    and the policy, router.upstreams the two servers' names as written in nginx.conf. At
#    concurrency 1 requests arrive 100 s apart (each ends before the next, as in the real run);
#    at the slot count as the replay's client sends them (closed_loop: kvsim sim has no client
#    with the replay's slots and send gap, so simulations are repeated until the arrivals they
#    imply stop changing).
# 3. Gates (fidelity fleetcmp): at concurrency 1 every request's cached_tokens exact and every
#    request routed (nginx's access log, $upstream_addr) to the replica kvsim chose; at the slot
#    count the hit rate within MAX_HIT_PP (default 2) points, once, no retry.
#
# Exit codes: 0 pass; 1 a gate missed or something broke; 75 nginx or llama-server is not
# installed (SKIPPED, said loudly).
#
# env: CONFIG (a llama-server config to use instead of calibrating; default: calibrate, step 0b),
#      REPEATS (calibration repeats, default 2), REQUEST_DELAY (default 800us, as e2e/fidelity.sh),
#      NP (slots per server, default 4), CTX (default 8192),
#      THREADS (default 1, docs/fidelity.md), MAX_HIT_PP (default 2),
#      SLOT_GATE (default 1; 0: the slot-count hit rate is printed, not gated),
#      SEND_GAP (default 5ms),
#      NGINX (the nginx binary, default: nginx on PATH or /usr/sbin/nginx),
#      KVSIM_LLAMA_ROOT (the chroot, default /opt/kvsim-llama).
set -euo pipefail
cd "$(dirname "$0")/.."
. e2e/lib.sh
e2e_out nginx "${1:-}"
export NP=${NP:-4} CTX=${CTX:-8192} THREADS=${THREADS:-1} TIMEOUT=${TIMEOUT:-60}
CONFIG=${CONFIG:-}
REPEATS=${REPEATS:-2}
REQUEST_DELAY=${REQUEST_DELAY:-800us}
MAX_HIT_PP=${MAX_HIT_PP:-2}
SLOT_GATE=${SLOT_GATE:-1}
SEND_GAP=${SEND_GAP:-5ms}
ROOT=${KVSIM_LLAMA_ROOT:-/opt/kvsim-llama}
VOCAB=1:256
SLOTS=$((2 * NP))
say() { echo "e2e/nginx: $*" >&2; }
skip() {
  {
    echo "################################################################################"
    echo "e2e/nginx: SKIPPED nginx in front of two llama-servers: $*"
    echo "################################################################################"
  } >&2
  exit 75
}

# A fresh CI machine has no nginx: as root, install Debian's (its upstream hash module is built
# in); when the mirror cannot provide it, skip loudly as for llama.cpp.
if [ -z "${NGINX:-}" ] && ! command -v nginx >/dev/null 2>&1 && [ ! -x /usr/sbin/nginx ] && [ "$(id -u)" = 0 ]; then
  say "installing nginx from Debian (its service not started: policy-rc.d)"
  rcd=
  [ -e /usr/sbin/policy-rc.d ] || { printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && rcd=1; }
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nginx; } >&2 ||
    say "apt-get could not install nginx"
  [ -z "$rcd" ] || rm -f /usr/sbin/policy-rc.d
fi
NGINX=${NGINX:-$(command -v nginx || echo /usr/sbin/nginx)}
[ -x "$NGINX" ] || skip "no nginx, and Debian's could not be installed (apt-get install nginx)"
[ -x "$ROOT/usr/bin/llama-server" ] || skip "no llama-server in $ROOT (e2e/llama/setup.sh)"
[ -s "$ROOT/models/tiny.gguf" ] || skip "no tiny model in $ROOT/models (e2e/llama/setup.sh)"
START=$SECONDS

e2e_build "$OUT"

SERVERS=()
NGINX_DIRS=()
# stop_nginx DIR: the nginx started in DIR, by the PID start_nginx wrote, if it is still nginx.
stop_nginx() {
  local p
  [ -s "$1/pid" ] || return 0
  p=$(cat "$1/pid")
  if kill -0 "$p" 2>/dev/null && grep -q nginx "/proc/$p/cmdline" 2>/dev/null; then
    kill -QUIT "$p" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$p" 2>/dev/null && kill -KILL "$p" 2>/dev/null
  fi
  rm -f "$1/pid"
}
stop_all() {
  for d in "${NGINX_DIRS[@]}"; do stop_nginx "$d"; done
  NGINX_DIRS=()
  for s in "${SERVERS[@]}"; do bash e2e/llama/stop.sh "$s" 2>/dev/null || true; done
  SERVERS=()
}
trap stop_all EXIT
trap 'stop_all; exit 130' INT TERM

# nginx_conf DIR PORT BALANCER UPSTREAMS [EXTRA_SERVER_BLOCKS [BALANCED_PATH]]: a config for a
# private prefix DIR; BALANCED_PATH (default /v1/completions) goes through the upstream block,
# other paths to the first upstream.
nginx_conf() {
  local dir=$1 port=$2 balancer=$3 ups=$4 extra=${5:-} path=${6:-/v1/completions} s
  mkdir -p "$dir/tmp"
  {
    echo "worker_processes 1;"
    echo "daemon off;"
    echo "pid $dir/nginx.pid;"
    echo "error_log $dir/error.log;"
    echo "events { worker_connections 256; }"
    echo "http {"
    echo "  log_format up '\$upstream_addr';"
    echo "  access_log off;"
    for t in client_body proxy fastcgi uwsgi scgi; do echo "  ${t}_temp_path $dir/tmp;"; done
    echo "  upstream llama {"
    [ "$balancer" = hash ] && echo "    hash \$http_x_session_id consistent;"
    for s in ${ups//,/ }; do echo "    server $s;"; done
    echo "  }"
    echo "  server {"
    echo "    listen 127.0.0.1:$port;"
    echo "    location = /nginx-ready { return 200 ok; }"
    # Only the completions are balanced: every request through the balancer takes a turn of
    # the round robin, and the replay's model query (GET /v1/models) is not a trace request.
    echo "    location $path {"
    echo "      proxy_pass http://llama;"
    echo "      access_log $dir/access.log up;"
    echo "      proxy_http_version 1.1;"
    echo "      proxy_set_header Connection \"\";"
    echo "      proxy_buffering off;"
    echo "      proxy_read_timeout 600s;"
    echo "    }"
    [ "$path" = / ] || echo "    location / { proxy_pass http://${ups%%,*}; }"
    echo "  }"
    echo "$extra"
    echo "}"
  } >"$dir/nginx.conf"
}

# start_nginx DIR BALANCER UPSTREAMS [EXTRA [BALANCED_PATH]]: nginx on a free port (tried up to 10 times); prints
# its URL once it answers /nginx-ready, which nginx answers itself: a request passed upstream
# would take a turn of the round robin. It runs in a command substitution,
# so it writes its PID to DIR/pid for stop_all (the caller adds DIR to NGINX_DIRS first).
start_nginx() {
  local dir=$1 port pid
  for _ in $(seq 10); do
    port=$((20000 + RANDOM % 12000)) # below Linux's ephemeral ports (32768-60999), where clients' connections are
    nginx_conf "$dir" "$port" "$2" "$3" "${4:-}" "${5:-}"
    "$NGINX" -p "$dir" -c "$dir/nginx.conf" -e "$dir/error.log" >"$dir/stdout.log" 2>&1 </dev/null &
    pid=$!
    echo "$pid" >"$dir/pid"
    for _ in $(seq 50); do
      if curl -sf "http://127.0.0.1:$port/nginx-ready" >/dev/null 2>&1; then
        echo "http://127.0.0.1:$port"
        return 0
      fi
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    stop_nginx "$dir"
  done
  say "nginx would not start; last lines of $dir/error.log:"
  tail -5 "$dir/error.log" >&2 || true
  return 1
}

# 0. Routing alone: nginx's own server blocks as the upstreams, each answering its name.
say "routing check: nginx $("$NGINX" -v 2>&1 | sed 's/.*\///') against kvsim's nginx_hash and nginx_round_robin"
route_nginx() { # BALANCER DIR: nginx over three of its own servers; prints "URL UPSTREAMS"
  local base ups extra url i
  for _ in 1 2 3; do # the three servers' ports are fixed per try: another try takes others
    base=$((20000 + RANDOM % 12000))
    ups=""
    extra=""
    for i in 1 2 3; do
      ups+="${ups:+,}127.0.0.1:$((base + i))"
      extra+="  server { listen 127.0.0.1:$((base + i)); location / { return 200 \"127.0.0.1:$((base + i))\"; } }"$'\n'
    done
    if url=$(start_nginx "$2" "$1" "$ups" "$extra" /); then
      echo "$url $ups"
      return 0
    fi
  done
  return 1
}
for balancer in hash rr; do
  dir="$OUT/route-$balancer"
  NGINX_DIRS+=("$dir")
  read -r url ups < <(route_nginx "$balancer" "$dir") || true
  [ -n "${url:-}" ] || { say "the routing check's nginx would not start"; exit 1; }
  if [ "$balancer" = hash ]; then
    "$OUT/fidelity" route -url "$url/" -policy nginx_hash -upstreams "$ups" -n 2000
  else
    "$OUT/fidelity" route -url "$url/" -policy nginx_round_robin -upstreams "$ups" -n 300
  fi
  stop_all
done

# 0b. The calibration, unless CONFIG is given: as e2e/fidelity.sh calibrates (kvsim calibrate's
# own trace, REPEATS repeats of every shape, at NP, with the server logs), but on two servers at
# once, each replayed the trace at the same time: the two servers share the machine's two vCPUs
# (with nginx and the client), which on this machine doubles a prompt token's cost against one
# server alone, and the fleet model's replicas do not slow each other down (real replicas have
# machines of their own).
if [ -z "$CONFIG" ]; then
  cal="$OUT/calibration"
  mkdir -p "$cal"
  "$KV" calibrate --config configs/llamacpp/tiny.toml --gen-trace "$cal/cal.jsonl" --repeats "$REPEATS" --seed 1 >/dev/null
  SERVERS+=("$cal/server1" "$cal/server2")
  u1=$(bash e2e/llama/start.sh -d "$cal/server1" 2>"$cal/start1.log")
  u2=$(bash e2e/llama/start.sh -d "$cal/server2" 2>"$cal/start2.log")
  say "calibration: the calibration trace against $u1 and $u2 at once (NP=$NP THREADS=$THREADS, $REPEATS repeats)"
  "$KV" replay --trace "$cal/cal.jsonl" --target "$u1" --api openai --max-concurrency "$NP" --vocab "$VOCAB" \
    --no-keep-alive --per-request "$cal/run1.jsonl" --json >/dev/null &
  p1=$!
  "$KV" replay --trace "$cal/cal.jsonl" --target "$u2" --api openai --max-concurrency "$NP" --vocab "$VOCAB" \
    --no-keep-alive --per-request "$cal/run2.jsonl" --json >/dev/null
  wait "$p1"
  stop_all
  "$KV" calibrate --config configs/llamacpp/tiny.toml --per-request "$cal/run1.jsonl" --server-log "$cal/server1/server.log" \
    --per-request "$cal/run2.jsonl" --server-log "$cal/server2/server.log" --request-delay "$REQUEST_DELAY" \
    --out "$OUT/calibrated.toml" >"$cal/calibrate.txt"
  CONFIG=$OUT/calibrated.toml
fi

# The concurrency-1 trace: 6 documents of 800 tokens, 5 questions of 80 tokens each, document by
# document (30 requests); the session is the document.
"$KV" trace gen shared-prefix --groups 6 --questions 5 --system-prompt-len 800 --question-len 80 \
  --output-len 32 --order grouped --vocab "$VOCAB" --seed 8 --out "$OUT/shared.jsonl" 2>/dev/null
# The slot-count trace: 3 documents of 800 tokens, 32 questions of 80 tokens each (96 requests,
# 8 output tokens), each document a user who asks the next question when the answer to the
# previous one has come (fidelity chain: its Parent). At most 3 requests are in flight, one a
# document, so on either server a document's slot is idle when its next question comes, and at
# most 3 documents share a server's 4 slots: llama-server's slot rules (the idle slot with the
# longest common prefix, else the least recently used, an empty one first) keep every document
# in a slot of its own on every server it has been to. A request then hits its document exactly
# when the router sent that document to that server before, whatever the timing: 3 misses under
# nginx_hash (a document stays on its server), under round robin one for each (document,
# server) pair the rotation brings. One hit is 0.95 pp of the prompt tokens.
"$KV" trace gen shared-prefix --groups 3 --questions 32 --system-prompt-len 800 --question-len 80 \
  --output-len 8 --order grouped --vocab "$VOCAB" --seed 8 --out "$OUT/docs.jsonl" 2>/dev/null
"$OUT/fidelity" chain -trace "$OUT/docs.jsonl" -out "$OUT/chain.jsonl"

# closed_loop RUN C TRACE: the fleet simulation of the replay of TRACE at concurrency C. kvsim sim
# has no client with the replay's slots and send gap, so the client's rules (replay/pace.go: a record is sent when its Parent has
# ended and a slot is free, SEND_GAP after the previous send) are applied from outside: simulate,
# set each arrival from the simulated requests' times (fidelity simtrace -sim), simulate again,
# until the arrivals stop changing. The arrivals come from the simulation alone.
closed_loop() {
  local run=$1 c=$2 trace=$3 i
  "$OUT/fidelity" simtrace -trace "$trace" -out "$run/sim-trace.jsonl" -gap "$SEND_GAP" -closed "$c"
  for i in $(seq 300); do
    "$KV" sim --config "$run/fleet.toml" --trace "$run/sim-trace.jsonl" --per-request "$run/sim.jsonl" >"$run/sim.txt"
    "$OUT/fidelity" simtrace -trace "$trace" -out "$run/sim-trace.next.jsonl" -gap "$SEND_GAP" -closed "$c" -sim "$run/sim.jsonl"
    if cmp -s "$run/sim-trace.jsonl" "$run/sim-trace.next.jsonl"; then
      say "closed loop: arrivals fixed after $i simulations"
      return 0
    fi
    mv "$run/sim-trace.next.jsonl" "$run/sim-trace.jsonl"
  done
  say "closed loop: arrivals still changing after $i simulations"
  return 1
}

# one BALANCER C: the real run and the prediction; fleetcmp's exit status.
one() {
  local balancer=$1 c=$2 policy name run url1 url2 ups url gate trace=$OUT/chain.jsonl
  [ "$c" = 1 ] && trace=$OUT/shared.jsonl
  policy=nginx_round_robin
  [ "$balancer" = hash ] && policy=nginx_hash
  name="$policy-c$c"
  run="$OUT/$name"
  mkdir -p "$run"
  SERVERS+=("$run/server1" "$run/server2")
  url1=$(bash e2e/llama/start.sh -d "$run/server1" 2>"$run/start1.log")
  url2=$(bash e2e/llama/start.sh -d "$run/server2" 2>"$run/start2.log")
  ups="${url1#http://},${url2#http://}"
  NGINX_DIRS+=("$run/nginx")
  url=$(start_nginx "$run/nginx" "$balancer" "$ups")
  say "$name: nginx $url -> $ups"
  # No warm-up request: it would take a turn of the round robin and cache the first prompt on one
  # server, which the fleet simulator (no warm-up) would not see.
  "$KV" replay --trace "$trace" --target "$url" --api openai --max-concurrency "$c" --warmup=false \
    --send-gap "$SEND_GAP" --vocab "$VOCAB" --no-keep-alive --per-request "$run/real.jsonl" --json >"$run/real.json"
  stop_all
  {
    cat "$CONFIG"
    printf '\n[[fleet.groups]]\nname = "llama-server"\ncount = 2\n\n[router]\npolicy = "%s"\nupstreams = ["%s", "%s"]\n' \
      "$policy" "${ups%,*}" "${ups#*,}"
  } >"$run/fleet.toml"
  # Paths in CONFIG (none in the llama-server configs) would be relative to its own folder.
  if [ "$c" = 1 ]; then
    "$OUT/fidelity" simtrace -trace "$trace" -out "$run/sim-trace.jsonl" -gap 100s
    "$KV" sim --config "$run/fleet.toml" --trace "$run/sim-trace.jsonl" --per-request "$run/sim.jsonl" >"$run/sim.txt"
  else
    closed_loop "$run" "$c" "$trace" || return 1
  fi
  if [ "$c" = 1 ]; then
    gate=(-exact -access "$run/nginx/access.log" -upstreams "$ups")
  else
    gate=(-max-hit-pp "$MAX_HIT_PP")
  fi
  "$OUT/fidelity" fleetcmp -name "$name" -real "$run/real.jsonl" -sim "$run/sim.jsonl" "${gate[@]}" | tee "$run/cmp.txt"
}

status=0
for balancer in rr hash; do
  one "$balancer" 1 || status=1
  rc=0
  one "$balancer" "$SLOTS" || rc=$?
  if [ "$rc" != 0 ]; then
    if [ "$SLOT_GATE" = 0 ]; then
      say "REPORTED, NOT GATED (SLOT_GATE=0): the slot-count hit rate of $balancer (exit $rc above)"
    else
      status=1
    fi
  fi
done
say "done in $((SECONDS - START)) s (results in $OUT)"
exit "$status"
