#!/usr/bin/env bash
# Where one benchmark cell's CPU time goes: perf samples (cpu-clock, a software event, so that it
# runs in a VM without hardware counters), each function's share of them, the top 15.
#
#   bash scripts/profile.sh EXECUTABLE FILTER [THREADS]
#     EXECUTABLE  a benchmark of bench/ (pool_bench, alloc_bench_tbb, resource_bench, ...)
#     FILTER      Google Benchmark's --benchmark_filter, one cell: pool.handoff/pool/threads:8/
#     THREADS     SLUICE_BENCH_THREADS for the families that read it (default 1,2,4,8)
# Installs what it lacks (scripts/deps.sh bench profile) and builds the executable in build-bench
# (release, as scripts/bench.sh does) if it is missing. docs/bench/profiles.md shows what it
# printed, and why.
set -euo pipefail
cd "$(dirname "$0")/.."
(($# >= 2)) || { sed -n 2,11p "$0"; exit 2; }
exe=$1 filter=$2
export SLUICE_BENCH_THREADS=${3:-${SLUICE_BENCH_THREADS:-1,2,4,8}}
scripts/deps.sh bench profile >/dev/null
if [[ ! -x build-bench/bench/$exe ]]; then
  [[ -f build-bench/build.ninja ]] ||
    meson setup build-bench --buildtype=release -Dtests=disabled -Dexamples=disabled -Dbenchmarks=enabled >/dev/null
  ninja -C build-bench "bench/$exe" >/dev/null
fi
data=$(mktemp)
trap 'rm -f "$data"' EXIT
perf record -q -e cpu-clock -o "$data" "build-bench/bench/$exe" --benchmark_filter="$filter" \
  --benchmark_min_time="${SLUICE_BENCH_MIN_TIME:-1}" 2>/dev/null | grep -E '^(pool|gate)' || true
echo "cpu-clock samples by function, self time ($exe, $filter):"
perf report -q -i "$data" --no-children --sort dso,sym 2>/dev/null | grep -v '^$' | head -15
