#!/usr/bin/env bash
# Install llama.cpp's real llama-server (Debian sid's llama.cpp-tools) into a Debian sid chroot
# and write random-weight GGUF models for it with kvsim's own writer (internal/gguf).
# Idempotent: what is already there is kept. Needs root (debootstrap, chroot).
#
#   e2e/llama/setup.sh                       # chroot in /opt/kvsim-llama, models tiny + smol135m
#   KVSIM_LLAMA_ROOT=/srv/llama MODELS=tiny e2e/llama/setup.sh
#
# Exit codes:
#   0   ready: $ROOT/usr/bin/llama-server runs and the models exist
#   75  the Debian mirror could not provide the chroot or the packages (network down, mirror
#       without sid, llama.cpp-tools missing): callers such as CI report it loudly and go on
#   1   anything else (not root, a broken install, the model writer failed): a real failure
#
# Why a chroot: llama.cpp is packaged only in Debian sid; its binaries need a newer glibc and
# libstdc++ than a bookworm machine has. See e2e/README.md.
set -euo pipefail

ROOT=${KVSIM_LLAMA_ROOT:-/opt/kvsim-llama}
MODELS=${MODELS:-"tiny smol135m"}
QUANT=${QUANT:-Q8_0}       # also write <model>-q8_0.gguf for non-tiny models; empty to skip
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
EX_MIRROR=75

say() { echo "e2e/llama/setup: $*" >&2; }
mirror_fail() {
  {
    echo "################################################################################"
    echo "e2e/llama/setup: THE DEBIAN MIRROR CANNOT PROVIDE llama.cpp: $*"
    echo "e2e/llama/setup: mirror: ${MIRROR:-?}; the end-to-end checks against llama-server are SKIPPED"
    echo "################################################################################"
  } >&2
  exit "$EX_MIRROR"
}

[ "$(id -u)" = 0 ] || { say "needs root (debootstrap and chroot)"; exit 1; }

# The Debian mirror this machine already uses (first URIs line of its apt sources).
MIRROR=${MIRROR:-$(grep -h -m1 -E '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -1 | awk '{print $2}' || true)}
[ -n "$MIRROR" ] || MIRROR=$(grep -h -m1 -E '^deb ' /etc/apt/sources.list 2>/dev/null | awk '{print $2}' || true)
[ -n "$MIRROR" ] || mirror_fail "no Debian mirror found in the apt sources"

if [ ! -x "$ROOT/usr/bin/llama-server" ]; then
  if ! command -v debootstrap >/dev/null; then
    say "installing debootstrap"
    apt-get update -qq || mirror_fail "apt-get update failed on the host"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null ||
      mirror_fail "cannot install debootstrap"
  fi
  if [ ! -x "$ROOT/usr/bin/apt-get" ]; then
    say "debootstrap sid into $ROOT from $MIRROR (about 1 minute)"
    mkdir -p "$ROOT"
    # A failed debootstrap leaves a half-made root: remove it so the next run starts clean.
    if ! debootstrap --variant=minbase sid "$ROOT" "$MIRROR" >"$ROOT.debootstrap.log" 2>&1; then
      tail -5 "$ROOT.debootstrap.log" >&2 || true
      rm -rf "$ROOT"
      mirror_fail "debootstrap of sid failed (log: $ROOT.debootstrap.log)"
    fi
  fi
  # The mirror can serve a sid Release whose Valid-Until has passed (the recipe saw Date
  # 2026-10-30, Valid-Until 2026-11-06 on a machine whose clock said 2026-11-30); sid's apt then
  # refuses it. The archive is still signed; only the freshness check is off.
  echo 'Acquire::Check-Valid-Until "false";' >"$ROOT/etc/apt/apt.conf.d/99no-check-valid-until"
  chroot "$ROOT" apt-get update -qq || mirror_fail "apt-get update in the sid chroot failed"
  cand=$(chroot "$ROOT" apt-cache policy llama.cpp-tools 2>/dev/null | awk '/Candidate:/ {print $2}')
  if [ -z "$cand" ] || [ "$cand" = "(none)" ]; then
    mirror_fail "sid on this mirror has no llama.cpp-tools package"
  fi
  say "installing llama.cpp-tools $cand (about 30 s)"
  chroot "$ROOT" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends llama.cpp-tools >/dev/null ||
    mirror_fail "apt-get install llama.cpp-tools $cand failed"
  chroot "$ROOT" apt-get clean
fi

# From here on a failure is real, not the mirror's.
ver=$(chroot "$ROOT" llama-server --version 2>&1) || { echo "$ver" >&2; say "llama-server does not run in $ROOT"; exit 1; }
echo "$ver" | grep -E 'version|built' >&2 || true

GO=${GO:-go}
command -v "$GO" >/dev/null || GO=/usr/local/go/bin/go
mkdir -p "$ROOT/models"
for m in $MODELS; do
  if [ ! -s "$ROOT/models/$m.gguf" ]; then
    say "writing $ROOT/models/$m.gguf"
    (cd "$REPO" && "$GO" run ./internal/gguf/cmd/mkgguf -preset "$m" -o "$ROOT/models/$m.gguf.tmp")
    mv "$ROOT/models/$m.gguf.tmp" "$ROOT/models/$m.gguf"
  fi
  if [ -n "$QUANT" ] && [ "$m" != tiny ]; then
    q=$(echo "$QUANT" | tr 'A-Z' 'a-z')
    if [ ! -s "$ROOT/models/$m-$q.gguf" ]; then
      say "quantizing $m to $QUANT"
      chroot "$ROOT" llama-quantize "/models/$m.gguf" "/models/$m-$q.gguf.tmp" "$QUANT" >/dev/null 2>&1 ||
        { say "llama-quantize $m $QUANT failed"; exit 1; }
      mv "$ROOT/models/$m-$q.gguf.tmp" "$ROOT/models/$m-$q.gguf"
    fi
  fi
done
ls -la "$ROOT/models" >&2
say "ready: start with e2e/llama/start.sh (KVSIM_LLAMA_ROOT=$ROOT)"
