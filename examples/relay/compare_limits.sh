#!/usr/bin/env bash
# This tree's relay, built for release in a temporary directory, with one slow rank: the fixed
# window (the pressure alone) against each latency limit, run in turn in each round (the order
# rotated a step each round, so that no mode always runs first or after the same one). Prints
# each run's figures, then each mode's median and range.
#
#   examples/relay/compare_limits.sh [SECONDS [ROUNDS]]     # default 10 s a run, 3 rounds
#   RELAY_ARGS='--slow-rank=2M --ranks=8' examples/relay/compare_limits.sh 10 3
set -euo pipefail
seconds=${1:-10}
rounds=${2:-3}
args=${RELAY_ARGS:---slow-rank=8M}
root=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

meson setup "$tmp/build" "$root" --buildtype=release -Dtests=disabled -Dbenchmarks=disabled \
  -Dpython=disabled >/dev/null
ninja -C "$tmp/build" examples/relay/relay >/dev/null
relay=$tmp/build/examples/relay/relay

modes=(fixed vegas gradient2 aimd)
changes=$(git -C "$root" status --porcelain --untracked-files=no | wc -l)
echo "relay $args --duration=$seconds, release build of this tree" \
     "($(git -C "$root" rev-parse --short HEAD), $changes files changed); latencies in ms:" \
     "e2e = first byte sent to last byte received, hub = read whole to written"
results=$tmp/results
for round in $(seq "$rounds"); do
  for i in "${!modes[@]}"; do
    mode=${modes[(i + round - 1) % ${#modes[@]}]}
    limit=()
    [ "$mode" != fixed ] && limit=(--limit="$mode")
    # set -e: a run whose verdict fails ends the script.
    # shellcheck disable=SC2086  # args holds several options
    out=$("$relay" $args --duration="$seconds" --report-every=100000 "${limit[@]}")
    rate=$(sed -nE 's/^relay: .*: ([0-9]+) frames\/s.*/\1/p' <<<"$out")
    read -r e2e50 e2e99 hub50 hub99 < <(sed -nE 's/^latency: .* p50 ([0-9.]+) ms, p99 ([0-9.]+) ms, max [0-9.]+ ms; in the hub, read whole to written p50 ([0-9.]+) ms, p99 ([0-9.]+) ms.*/\1 \2 \3 \4/p' <<<"$out")
    read -r slow50 slow99 fast50 fast99 < <(sed -nE 's/^latency: sent to received, to rank 0 \(slow\) p50 ([0-9.]+) ms, p99 ([0-9.]+) ms; to the other ranks p50 ([0-9.]+) ms, p99 ([0-9.]+) ms/\1 \2 \3 \4/p' <<<"$out")
    rss=$(sed -nE 's/^memory: peak resident ([0-9.]+) MiB.*/\1/p' <<<"$out")
    cap=$(sed -nE 's/^limit: .* over the ticks ([0-9.]+) in all windows, ([0-9.]+ \.\. [0-9.]+) by window.*/\1 (\2)/p' <<<"$out")
    printf '%-9s round %d: %6d frames/s; e2e p50 %.1f p99 %.1f (to rank 0 p50 %.1f p99 %.1f, to the others p50 %.1f p99 %.1f); hub p50 %.3f p99 %.3f; peak resident %.1f MiB%s\n' \
      "$mode" "$round" "$rate" "$e2e50" "$e2e99" "$slow50" "$slow99" "$fast50" "$fast99" "$hub50" \
      "$hub99" "$rss" "${cap:+; mean cap $cap units}"
    echo "$mode $rate $e2e50 $e2e99 $slow99 $fast50 $fast99 $hub50 $hub99 $rss" >>"$results"
  done
done
# Each figure's median (the middle run; the mean of the two middle ones for an even count) and range.
names=(x "frames/s" "e2e p50" "e2e p99" "to rank 0 p99" "to the others p50" "to the others p99" "hub p50" "hub p99" "peak MiB")
for mode in "${modes[@]}"; do
  line=$(printf '%-9s median (range):' "$mode")
  for col in 2 3 4 5 6 7 8 9 10; do
    line+=$(awk -v m="$mode" -v c="$col" '$1 == m { print $c }' "$results" | sort -g |
      awk -v name="${names[col - 1]}" '{ v[NR] = $1 }
        END { m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
              printf " %s %g (%g .. %g)%s", name, m, v[1], v[NR], name == "peak MiB" ? "" : ";" }')
  done
  echo "$line"
done
