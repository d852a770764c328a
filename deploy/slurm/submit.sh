#!/usr/bin/env bash
# Submit a kvsim study to Slurm: a job array of N shards, then a merge job that runs once every
# shard has succeeded (--dependency=afterok). Prints "ARRAY_JOB_ID MERGE_JOB_ID" on stdout.
#
#   deploy/slurm/submit.sh --study configs/studies/default.toml --shards 16 --out results \
#     [--partition P] [--time 1:00:00] [--cpus 2] [--mem 2G] [--kvsim bin/kvsim] \
#     [--logs DIR] [--tasks LIST] [--no-merge] [-- EXTRA_SBATCH_ARGS...]
#
# --tasks takes sbatch's --array syntax (0-15, 3,7, 0-15%4 to run at most 4 at once).
#
# Shard i writes OUT/shard-i-of-N/; the merge writes OUT/merged/ (results.jsonl, results.csv,
# report.md, plots). The jobs run in the directory you submit from (--chdir), and the study and
# output paths are passed as you give them, relative to it (report.md quotes the study path as
# given, so the merged report matches a run of `kvsim study` there); every node must see that
# directory at the same path (a shared file system). To rerun shards that failed, give the
# same flags and --tasks with their indices (for example --tasks 3,7): a shard resumes from the
# points already in its folder, and the new merge job waits for the new tasks.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

usage() {
  sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
}
die() {
  echo "submit.sh: $*" >&2
  exit 2
}

study="" shards="" out="" partition="" time_limit="1:00:00" cpus=2 mem="2G" kvsim="" logs="" tasks="" merge=1
extra=()
while [ $# -gt 0 ]; do
  case $1 in
    --study | --shards | --out | --partition | --time | --cpus | --mem | --kvsim | --logs | --tasks)
      [ $# -ge 2 ] || die "$1 needs a value"
      case $1 in
        --study) study=$2 ;;
        --shards) shards=$2 ;;
        --out) out=$2 ;;
        --partition) partition=$2 ;;
        --time) time_limit=$2 ;;
        --cpus) cpus=$2 ;;
        --mem) mem=$2 ;;
        --kvsim) kvsim=$2 ;;
        --logs) logs=$2 ;;
        --tasks) tasks=$2 ;;
      esac
      shift 2 ;;
    --no-merge) merge=0; shift ;;
    -h | --help) usage ;;
    --) shift; extra=("$@"); break ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done

[ -n "$study" ] || die "--study FILE is required"
[ -f "$study" ] || die "--study: no such file: $study"
[ -n "$out" ] || die "--out DIR is required (shards write DIR/shard-i-of-N, the merge DIR/merged)"
[[ $shards =~ ^[1-9][0-9]*$ ]] || die "--shards: want a positive integer, got '$shards'"
[[ $cpus =~ ^[1-9][0-9]*$ ]] || die "--cpus: want a positive integer, got '$cpus'"
if [ -z "$kvsim" ]; then
  kvsim=$(command -v kvsim || true)
  [ -n "$kvsim" ] || die "no kvsim on PATH: give --kvsim PATH (make build writes bin/kvsim)"
fi
[ -x "$kvsim" ] || die "--kvsim: not an executable file: $kvsim"
[ -n "$tasks" ] || tasks="0-$((shards - 1))"
[[ $tasks =~ ^[0-9][0-9,-]*(%[1-9][0-9]*)?$ ]] || die "--tasks: want indices like 0-15, 3,7 or 0-15%4 (at most 4 at once), got '$tasks'"
for i in $(grep -o '[0-9]*' <<<"${tasks%\%*}"); do
  [ "$i" -lt "$shards" ] || die "--tasks: index $i is not a shard of $shards (0 to $((shards - 1)))"
done
command -v sbatch >/dev/null || die "sbatch not found: run this on a Slurm login node"

kvsim=$(realpath -- "$kvsim")
logs=$(realpath -m -- "${logs:-$out/logs}")
mkdir -p "$out" "$logs"

common=(--parsable --chdir "$PWD" --time "$time_limit")
[ -z "$partition" ] || common+=(--partition "$partition")
[ -z "$mem" ] || common+=(--mem "$mem")

# --parsable prints "jobid" or "jobid;cluster".
array=$(sbatch "${common[@]}" --array "$tasks" --cpus-per-task "$cpus" \
  --output "$logs/kvsim-study-%A_%a.out" "${extra[@]}" \
  "$here/study-array.sbatch" "$kvsim" "$study" "$out" "$shards")
array=${array%%;*}
echo "submit.sh: array job $array: shards $tasks of $shards of $study -> $out/shard-i-of-$shards" >&2
if [ "$merge" = 0 ]; then
  echo "$array"
  exit 0
fi
merge_job=$(sbatch "${common[@]}" --dependency "afterok:$array" --kill-on-invalid-dep=yes \
  --cpus-per-task 1 --output "$logs/kvsim-merge-%j.out" "${extra[@]}" \
  "$here/study-merge.sbatch" "$kvsim" "$out" "$shards")
merge_job=${merge_job%%;*}
echo "submit.sh: merge job $merge_job after every task of $array succeeds -> $out/merged" >&2
echo "$array $merge_job"
