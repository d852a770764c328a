#!/usr/bin/env bash
# The end-to-end check against a real llama-server, as `make e2e-real` and CI run it:
# set up the chroot and the tiny model (e2e/llama/setup.sh), then run the probes and the GGUF
# load test (go test -tags e2e), then the fidelity gate (e2e/fidelity.sh), then two servers behind
# nginx against kvsim's fleet (e2e/nginx.sh). When the Debian mirror cannot provide llama.cpp (setup exits
# 75) this says so loudly and exits 0, so CI goes on; any other failure exits non-zero.
set -uo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
rc=0
MODELS=${MODELS:-tiny} bash e2e/llama/setup.sh || rc=$?
if [ "$rc" = 75 ]; then
  echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!" >&2
  echo "e2e: SKIPPED the llama-server end-to-end checks: the Debian mirror cannot provide" >&2
  echo "e2e: llama.cpp-tools (see the message above). Nothing was tested against a real server." >&2
  echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!" >&2
  exit 0
elif [ "$rc" != 0 ]; then
  echo "e2e: setup failed (exit $rc)" >&2
  exit "$rc"
fi
"$GO" test -tags e2e -count=1 -timeout 10m -run 'Probe|GGUF|ReplayLosesNothing' ./e2e/ || exit 1
# The fidelity gate (docs/fidelity.md): calibrate on runs interleaved with the measurements (one
# run of two repeats of every shape before each trace), then on three other traces every
# request's cached_tokens predicted exactly at concurrency 1, and the cache hit rate within 2 pp
# at the slot count (chat, shared prefix and warm-cache sweep, sent with a 5 ms gap so that the
# server sees the client's order). Timing errors and the real server's own run-to-run error
# (the real-vs-real column) are printed, not gated: that spread on this shared 2-vCPU machine is as
# large as the targets.
# The slot-count hit rate depends on which slot each request lands in, so on the server's timing:
# on 2026-12-02 the real shared-prefix runs at -np 4 gave 0.2151, 0.2454 and 0.2757 on this
# machine from one run to the next. A gate that misses is therefore run once more, with fresh
# calibration and real runs, and fails CI only if it misses again (both results are printed).
if ! GATE=1 TRACES="chat shared warm" REPEATS=${REPEATS:-2} bash e2e/fidelity.sh "${FIDELITY_OUT:-}"; then
  echo "e2e: the fidelity gate missed a target; running it once more (the slot-count hit rate depends on the server's timing)" >&2
  GATE=1 TRACES="chat shared warm" REPEATS=${REPEATS:-2} bash e2e/fidelity.sh "${FIDELITY_OUT:+$FIDELITY_OUT-retry}" || exit 1
fi
# Two llama-servers behind a real nginx (round robin and `hash $http_x_session_id consistent`)
# against kvsim's fleet with nginx_round_robin and nginx_hash (e2e/nginx.sh: calibrated the same
# way on its two servers running at once, then every concurrency-1 request's cached_tokens and
# replica exact, and the slot-count hit rate within 2 pp on a trace whose hits the routing and
# llama-server's slot rules decide, not the timing: docs/fidelity.md, "Two servers behind
# nginx"). Without nginx it says SKIPPED loudly (exit 75) and CI goes on.
rc=0
SLOT_GATE=${SLOT_GATE:-1} bash e2e/nginx.sh "${NGINX_OUT:-}" || rc=$?
if [ "$rc" = 75 ]; then
  echo "e2e: SKIPPED nginx in front of two llama-servers (see the message above): apt-get install nginx-light" >&2
elif [ "$rc" != 0 ]; then
  exit "$rc"
fi
