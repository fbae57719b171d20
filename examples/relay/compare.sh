#!/usr/bin/env bash
# The thread-per-connection hub (commit 3d32600, before the Asio rewrite) and this tree's Asio hub,
# both built for release in a temporary directory, run one after the other with the same
# arguments at 3 and at 64 ranks; prints frames/s for each.
#
#   examples/relay/compare.sh [SECONDS [ROUNDS]]    # default 10 s a run, 1 round
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

echo "relay --duration=$seconds, release builds; old: threads ($old_commit), new: Asio ($(git -C "$root" rev-parse --short HEAD))"
for ranks in 3 64; do
  for round in $(seq "$rounds"); do
    for tree in old new; do
      # set -e: a run whose verdict fails ends the script.
      line=$("$tmp/build-$tree/examples/relay/relay" --ranks="$ranks" --duration="$seconds" \
               --report-every=1000 | grep '^relay: .* frames/s')
      printf '%-3s hub, %2d ranks, round %d: %s\n' "$tree" "$ranks" "$round" "${line#relay: }"
    done
  done
done
