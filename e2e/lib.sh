# shellcheck shell=bash
# Sourced, from the repository root, by the scripts that drive real llama-servers
# (e2e/fidelity.sh, e2e/nginx.sh, e2e/refit.sh): the Go toolchain they build with and the build
# of the two binaries they run.

# GO is the go command: $GO, else go on PATH, else the toolchain's usual place.
GO=${GO:-go}
command -v "$GO" >/dev/null || GO=/usr/local/go/bin/go

# e2e_build DIR: builds kvsim and the fidelity helper (e2e/fidelity) into DIR and sets KV to the
# former.
e2e_build() {
  "$GO" build -o "$1/kvsim" ./cmd/kvsim
  "$GO" build -o "$1/fidelity" ./e2e/fidelity
  KV=$1/kvsim
}

# e2e_out NAME [DIR]: sets OUT to DIR, or to a new temporary directory named for NAME, and
# creates it.
e2e_out() {
  OUT=${2:-$(mktemp -d "${TMPDIR:-/tmp}/kvsim-$1.XXXXXX")}
  mkdir -p "$OUT"
}
