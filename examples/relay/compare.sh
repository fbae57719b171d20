#!/usr/bin/env bash
# An earlier hub (OLD_COMMIT; by default 3d32600, the thread-per-connection hub before the Asio
# rewrite) and this tree's hub, both built for release in a temporary directory, run alternately
# (old, new, old, new, ...) with the same arguments at 3 and at 64 ranks; prints frames/s for each
# run, then each hub's median and range at each rank count.
#
#   examples/relay/compare.sh [SECONDS [ROUNDS]]               # default 10 s a run, 1 round
#   OLD_COMMIT=5cc36ad examples/relay/compare.sh 10 5          # against another commit's hub
set -euo pipefail
seconds=${1:-10}
rounds=${2:-1}
old_commit=${OLD_COMMIT:-3d32600}
root=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
tmp=$(mktemp -d)
trap 'git -C "$root" worktree remove --force "$tmp/old" >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT

git -C "$root" worktree add --detach "$tmp/old" "$old_commit" >/dev/null 2>&1
for tree in old new; do
  src=$tmp/old
  [ "$tree" = new ] && src=$root
  meson setup "$tmp/build-$tree" "$src" --buildtype=release -Dtests=disabled >/dev/null
  ninja -C "$tmp/build-$tree" examples/relay/relay >/dev/null
done

changes=$(git -C "$root" status --porcelain --untracked-files=no | wc -l)
echo "relay --duration=$seconds, release builds; old: $old_commit, new: this tree" \
     "($(git -C "$root" rev-parse --short HEAD), $changes files changed)"
results=$tmp/results
for ranks in 3 64; do
  for round in $(seq "$rounds"); do
    for tree in old new; do
      # set -e: a run whose verdict fails ends the script.
      line=$("$tmp/build-$tree/examples/relay/relay" --ranks="$ranks" --duration="$seconds" \
               --report-every=1000 | grep '^relay: .* frames/s')
      printf '%-3s hub, %2d ranks, round %d: %s\n' "$tree" "$ranks" "$round" "${line#relay: }"
      rate=$(sed -E 's/.*: ([0-9]+) frames\/s.*/\1/' <<<"$line")
      echo "$tree $ranks $rate" >>"$results"
    done
  done
done
# Median (the middle run; the mean of the two middle ones for an even count) and range.
for ranks in 3 64; do
  for tree in old new; do
    awk -v t="$tree" -v r="$ranks" '$1 == t && $2 == r { print $3 }' "$results" | sort -n |
      awk -v t="$tree" -v r="$ranks" '{ v[NR] = $1 }
        END { m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
              printf "%-3s hub, %2d ranks: median %.0f frames/s, range %d .. %d (%d runs)\n", t, r, m, v[1], v[NR], NR }'
  done
done
