#!/usr/bin/env bash
# bench-scale: how kvsim's commands scale with a trace's length (issue 19,
# target 5). It writes the Mooncake conversation trace (one hour) repeated
# back to back COPIES times with `kvsim trace gen repeat` into a temporary
# directory, runs each command of ROWS on every length, and prints wall time,
# peak RSS (GNU time's maximum resident set size) and both as a ratio to the
# first length. Memory that follows the trace's length, not its live state,
# shows as an RSS ratio that grows with the copies.
#
# To add a command, add a row to ROWS: "name|arguments", with {} where the
# trace's path goes (for example "sim|sim --trace {}").
#
# Environment:
#   KVSIM          the kvsim binary (default bin/kvsim)
#   TRACE          the trace to repeat (default the bundled Mooncake conversation trace)
#   COPIES         the lengths, in copies (default "1 4 24")
#   MAX_RSS_RATIO  if set, exit 1 when a row's peak RSS at the last length
#                  exceeds this many times its RSS at the first (for CI)
#   MAX_RSS_PER_REQ if set, exit 1 when a row's peak RSS grows by more than
#                  this many bytes per request from the first length to the
#                  last: memory that follows the trace, not the cache (for CI)
#   ONLY           if set, run only the rows whose name matches this
#                  extended regular expression (for example "^sim$")
#
# Timings are wall-clock on whatever else the machine is running: run on an
# idle machine, or say that it was shared.
set -euo pipefail

KVSIM=${KVSIM:-bin/kvsim}
TRACE=${TRACE:-configs/traces/mooncake_conversation.jsonl.zst}
COPIES=${COPIES:-"1 4 24"}
ROWS=(
	"trace stats|trace stats {}"
	"trace stats --opt=false|trace stats --opt=false {}"
	"policy|policy --trace {} --policy main_write_through --l1-pages 18279 --l2-pages 36558"
	# The full simulator on the default server; req_per_s is simulated
	# requests per wall second.
	"sim|sim --trace {}"
)

[ -x "$KVSIM" ] || { echo "bench-scale: $KVSIM is not an executable kvsim (make build)" >&2; exit 2; }
[ -r "$TRACE" ] || { echo "bench-scale: cannot read the trace $TRACE (set TRACE)" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "bench-scale: needs GNU time at /usr/bin/time (apt-get install time)" >&2; exit 2; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

for k in $COPIES; do
	"$KVSIM" trace gen repeat --copies "$k" --out "$tmp/x$k.jsonl" "$TRACE"
done
requests=$("$KVSIM" trace validate "$tmp/x${COPIES%% *}.jsonl" | awk '{print $2}')

# measure ARGS...: runs kvsim, prints "wall_s peak_rss_kb".
measure() {
	/usr/bin/time -f '%e %M' -o "$tmp/time" "$KVSIM" "$@" >/dev/null
	cat "$tmp/time"
}

fail=0
printf '%-26s %6s %10s %8s %10s %10s %8s %8s\n' command copies requests wall_s req_per_s rss_MB wall_x rss_x
for row in "${ROWS[@]}"; do
	name=${row%%|*}
	args=${row#*|}
	if [ -n "${ONLY:-}" ] && ! grep -Eq -- "$ONLY" <<<"$name"; then
		continue
	fi
	base_wall= base_rss= last_ratio= last_rss= last_n=
	for k in $COPIES; do
		read -r -a argv <<<"${args//\{\}/$tmp/x$k.jsonl}"
		read -r wall rss < <(measure "${argv[@]}")
		: "${base_wall:=$wall}" "${base_rss:=$rss}"
		first=${COPIES%% *}
		n=$((requests * k / first))
		last_rss=$rss last_n=$n
		last_ratio=$(awk -v a="$rss" -v b="$base_rss" 'BEGIN{printf "%.2f", a/b}')
		printf '%-26s %6s %10s %8.2f %10.0f %10.1f %8.2f %8s\n' "$name" "$k" "$n" "$wall" \
			"$(awk -v n="$n" -v w="$wall" 'BEGIN{print (w > 0 ? n/w : 0)}')" "$(awk -v r="$rss" 'BEGIN{print r/1024}')" \
			"$(awk -v a="$wall" -v b="$base_wall" 'BEGIN{print (b > 0 ? a/b : 0)}')" "$last_ratio"
	done
	if [ -n "${MAX_RSS_RATIO:-}" ] && awk -v r="$last_ratio" -v m="$MAX_RSS_RATIO" 'BEGIN{exit !(r > m)}'; then
		echo "bench-scale: $name: peak RSS grew $last_ratio times from the first length to the last (limit $MAX_RSS_RATIO)" >&2
		fail=1
	fi
	if [ -n "${MAX_RSS_PER_REQ:-}" ]; then
		per=$(awk -v a="$last_rss" -v b="$base_rss" -v n="$last_n" -v m="$requests" \
			'BEGIN{printf "%.0f", (n > m ? (a - b) * 1024 / (n - m) : 0)}')
		echo "bench-scale: $name: peak RSS grew $per bytes per request from the first length to the last (limit $MAX_RSS_PER_REQ)"
		if [ "$per" -gt "$MAX_RSS_PER_REQ" ]; then
			echo "bench-scale: $name: over the limit: memory follows the trace's length" >&2
			fail=1
		fi
	fi
done
exit $fail
