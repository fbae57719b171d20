#!/usr/bin/env bash
# Instructions per operation pair, counted by valgrind's callgrind: deterministic, unlike timings.
#
# Builds bench/instructions/count.cpp (release) in a scratch folder against a sluice checkout
# taken as its subprojects/sluice (a copy of meson.build, meson_options.txt, include/, lib/, as
# test/consumer/run.sh does), once with sluice a shared library and once static. Each workload
# runs under callgrind with N and with 2N iterations; (count(2N) - count(N)) / N is the cost of
# one iteration, with start-up, warm-up and exit cancelled out. Workloads (count.cpp):
#   pool                sluice::pool take(1024) + retire, a thread-cache hit
#   pool_acquire        sluice::pool acquire(1024) + retire, a thread-cache hit
#   pool_runtime_size   sluice::pool take(n) + retire, a thread-cache hit, n = 1024 read from argv
#                       (the compiler cannot fold the size's class)
#   pool_acquire_runtime_size  the same with acquire(n)
#   mutex_pool          sluice::mutex_pool take(1024) + retire
#   mutex_pool_acquire  sluice::mutex_pool acquire(1024) + retire
#   pool_resource       sluice::pool_resource allocate(1024, 16) + deallocate, through memory_resource
#   mutex_pool_resource the same on sluice::mutex_pool_resource
#   malloc              glibc malloc(1024), write one byte, free
#   gate                sluice::gate try_admit() + note_done(), cap gate_limit
#   gate_admit          sluice::gate admit() + note_done(), with room: the waiting form's first try
#   gate_weighted       sluice::gate try_admit(n) + note_done(n), n = 1024 read from argv
# Usage: scripts/instructions.sh [SLUICE_CHECKOUT (default: this repository)] [N (default 100000)]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
root=$(cd "${1:-$here}" && pwd)
n=${2:-100000}
workloads=(pool pool_acquire pool_runtime_size pool_acquire_runtime_size mutex_pool mutex_pool_acquire pool_resource mutex_pool_resource malloc gate gate_admit gate_weighted)

if ! command -v valgrind >/dev/null; then
  sudo=(); [[ $(id -u) -eq 0 ]] || sudo=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -qq
  "${sudo[@]}" apt-get install -y -qq --no-install-recommends valgrind >/dev/null
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$here/bench/instructions/meson.build" "$here/bench/instructions/count.cpp" "$work/"
mkdir -p "$work/subprojects/sluice"
cp -r "$root/meson.build" "$root/meson_options.txt" "$root/include" "$root/lib" "$work/subprojects/sluice/"

kinds=(shared static)
declare -A count
for kind in "${kinds[@]}"; do
  b=$work/build-$kind
  env -u CXXFLAGS -u LDFLAGS meson setup "$b" "$work" --buildtype=release \
      -Ddefault_library="$kind" --force-fallback-for=sluice >"$work/setup-$kind.log" 2>&1 \
    || { cat "$work/setup-$kind.log"; exit 1; }
  grep -q 'Subproject sluice finished' "$work/setup-$kind.log" \
    || { echo "sluice was not taken as a subproject"; cat "$work/setup-$kind.log"; exit 1; }
  meson compile -C "$b" >"$work/compile-$kind.log" 2>&1 || { cat "$work/compile-$kind.log"; exit 1; }
  [[ -e $b/subprojects/sluice/lib/libsluice.$([[ $kind == shared ]] && echo so || echo a) ]] \
    || { echo "no $kind libsluice was built"; exit 1; }
  for w in "${workloads[@]}"; do
    for iters in "$n" $((2 * n)); do
      log=$work/$kind-$w-$iters.log
      valgrind --tool=callgrind --callgrind-out-file=/dev/null "$b/count" "$w" "$iters" 1024 2>"$log" \
        || { echo "count $w $iters failed ($kind)"; cat "$log"; exit 1; }
      count[$kind,$w,$iters]=$(awk '/Collected :/ {print $NF}' "$log")
    done
  done
done

echo "instructions per iteration, callgrind, N=$n, release build of $root ($(git -C "$root" describe --always --dirty 2>/dev/null || echo '?'))"
printf '%-26s %10s %10s\n' workload "${kinds[@]}"
for w in "${workloads[@]}"; do
  row=()
  for kind in "${kinds[@]}"; do
    row+=("$(awk -v a="${count[$kind,$w,$n]}" -v b="${count[$kind,$w,$((2 * n))]}" -v n="$n" \
             'BEGIN { printf "%.2f", (b - a) / n }')")
  done
  printf '%-26s %10s %10s\n' "$w" "${row[@]}"
done
