#!/usr/bin/env bash
# `make docker-build-check`: build kvsim the way deploy/k8s/Dockerfile's build stage does, without
# a container runtime, and check the result. The two RUN lines marked "build-check" in the
# Dockerfile are taken from it and run as they are (the same text, the same shell), with the
# Dockerfile's ARGs set as the build sets them, so the flags cannot drift apart. Then:
#   - the binary is static (no program interpreter), `go version -m` records CGO_ENABLED=0 and
#     -trimpath, `kvsim version` prints the VERSION given, and -s left no symbol table;
#   - from the image's data folder as working directory (/kvsim in the image), every bundled
#     study loads, finds its base configuration and trace and hashes them (a shard that owns
#     no point: --shard 999/1000), and `kvsim study default` needs no file at all.
# The binary is left in bin/kvsim-static.
set -euo pipefail
cd "$(dirname "$0")/../.."
df=deploy/k8s/Dockerfile
say() { echo "docker-build-check: $*" >&2; }
die() {
  say "FAILED: $*"
  exit 1
}

marked() { # LABEL: the RUN line after "# build-check: LABEL", without RUN
  local lines
  lines=$(awk -v m="# build-check: $1" 'found { print; found = 0 } $0 == m { found = 1 }' "$df")
  [ "$(grep -c . <<<"$lines")" = 1 ] || die "$df: want one line after '# build-check: $1', got: $lines"
  [[ $lines == "RUN "* ]] || die "$df: the line after '# build-check: $1' is not a RUN line: $lines"
  echo "${lines#RUN }"
}
arg_default() { # NAME: the default of ARG NAME in the build stage
  sed -n "s/^ARG $1=//p" "$df" | head -n 1
}
build=$(marked "the binary")
data=$(marked "the data")

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export VERSION=${VERSION:-$(git describe --always --dirty 2>/dev/null || arg_default VERSION)}
export BIN=$tmp/kvsim DATA=$tmp/data
say "VERSION=$VERSION BIN=$BIN DATA=$DATA"
say "RUN $build"
sh -ec "$build"
say "RUN $data"
sh -ec "$data"

# Static: an ELF program header of type PT_INTERP (3) names the dynamic loader.
interp=$(od -An -v -tu1 -N 64 "$BIN" | tr -s ' \n' ' ' | awk '{
  if ($1 != 127 || $2 != 69 || $5 != 2) { print "not a 64-bit ELF file"; exit }
  phoff = 0; for (i = 8; i >= 1; i--) phoff = phoff * 256 + $(32 + i)
  phnum = $57 + 256 * $58
  print phoff, phnum
}')
[[ $interp =~ ^[0-9]+\ [0-9]+$ ]] || die "$BIN: $interp"
read -r phoff phnum <<<"$interp"
for ((i = 0; i < phnum; i++)); do
  type=$(od -An -v -tu4 -j $((phoff + 56 * i)) -N 4 "$BIN" | tr -d ' ')
  [ "$type" != 3 ] || die "$BIN has a program interpreter: it is not static"
done
say "static: none of the $phnum program headers is PT_INTERP"

# go version -m records CGO_ENABLED and -trimpath; with -trimpath it leaves -ldflags out, so
# the Dockerfile's -X main.version and -s (no symbol table) are checked by their effects.
info=$(go version -m "$BIN")
for want in "build	CGO_ENABLED=0" "build	-trimpath=true"; do
  grep -qF -- "$want" <<<"$info" || { echo "$info" >&2; die "go version -m $BIN lacks '$want'"; }
done
if grep -q -- '-X main.version=${VERSION}' <<<"$build"; then
  got=$("$BIN" version)
  [ "$got" = "kvsim $VERSION" ] || die "$BIN version: want 'kvsim $VERSION', got '$got'"
fi
if grep -q -- '-ldflags="-s' <<<"$build"; then
  ! go tool nm "$BIN" >/dev/null 2>&1 || die "$BIN has a symbol table although the build line strips it (-s)"
fi
say "go version -m: CGO_ENABLED=0, -trimpath=true; $("$BIN" version); no symbol table"

[ ! -e "$DATA/configs/configs.go" ] || die "the data folder still holds Go sources"
n=0
for f in "$DATA"/configs/studies/*.toml; do
  case $f in *_server.toml) continue ;; esac
  rel=configs/studies/$(basename "$f")
  (cd "$DATA" && "$BIN" study "$rel" --out "$tmp/out" --shard 999/1000 >/dev/null 2>"$tmp/err") ||
    { cat "$tmp/err" >&2; die "in the image's data folder, kvsim study $rel fails"; }
  n=$((n + 1))
done
[ "$n" -gt 0 ] || die "no study in $DATA/configs/studies"
(cd "$tmp" && HOME=$tmp XDG_CACHE_HOME=$tmp/cache "$BIN" study default --out "$tmp/out-default" --shard 999/1000 >/dev/null 2>"$tmp/err") ||
  { cat "$tmp/err" >&2; die "kvsim study default fails outside the repository"; }
say "the image's data folder: $n bundled studies load from /kvsim; kvsim study default needs no file"

mkdir -p bin
cp "$BIN" bin/kvsim-static
say "OK: bin/kvsim-static ($(du -h bin/kvsim-static | cut -f1)) built as the Dockerfile builds it"
