#!/usr/bin/env bash
# Builds sluice's benchmarks in release mode, runs every one, and prints the ratio tables.
# Writes docs/bench/<executable>.json (Google Benchmark's own output), docs/bench/results.md
# (the tables), docs/bench/pool.svg (ns per pair against threads, one panel per family) and
# docs/bench/threads.svg (the many-thread patterns: ns per block and hit rate against threads).
#
#   SLUICE_BENCH_THREADS   thread counts, default 1,2,4,8
#   SLUICE_BENCH_PATTERN_THREADS  the many-thread patterns' thread counts, default 1,2,8,64,512
#   SLUICE_BENCH_PATTERN_BUFFERS  blocks each pattern's run takes, default 1000000
#   SLUICE_BENCH_MIN_TIME  seconds per benchmark and thread count, default 0.2
#   SLUICE_BENCH_REPETITIONS  runs of each cell, interleaved at random, default 3: the tables give
#                          each cell's median and range, and count a cell won only where it wins
#                          every run (about 7 minutes in all on the project's 2-core VM)
# An allocator whose package is missing is skipped with a line saying so; nothing else is.
set -uo pipefail
cd "$(dirname "$0")/.."

scripts/deps.sh bench || echo "bench: could not install every package; going on with what is installed"

dir=build-bench
out=docs/bench
min_time=${SLUICE_BENCH_MIN_TIME:-0.2}
repetitions=${SLUICE_BENCH_REPETITIONS:-3}
export SLUICE_BENCH_THREADS=${SLUICE_BENCH_THREADS:-1,2,4,8}

mkdir -p "$dir"
reconfigure=()
[[ -f $dir/build.ninja ]] && reconfigure=(--reconfigure)
meson setup "$dir" "${reconfigure[@]}" --buildtype=release -Dtests=disabled -Dexamples=disabled -Dbenchmarks=enabled \
  >"$dir/setup.log" 2>&1 || { tail -30 "$dir/setup.log"; echo "bench: configure failed"; exit 1; }
ninja -C "$dir" >"$dir/build.log" 2>&1 || { tail -40 "$dir/build.log"; echo "bench: build failed"; exit 1; }

mkdir -p "$out"
# executable, and the package that provides what it measures
runs=("pool_bench libboost-dev" "alloc_bench_mimalloc libmimalloc-dev"
      "alloc_bench_jemalloc libjemalloc-dev" "alloc_bench_tbb libtbb-dev" "gate_bench -"
      "resource_bench -" "asio_bench libasio-dev")
status=0
results=()
start=$SECONDS
echo "bench: threads $SLUICE_BENCH_THREADS, min time ${min_time}s per benchmark, $repetitions runs of each"
for entry in "${runs[@]}"; do
  read -r exe package <<<"$entry"
  json=$out/$exe.json
  if [[ ! -x $dir/bench/$exe ]]; then
    echo "skipped: ${exe#alloc_bench_} ($package not installed)"
    rm -f "$json"  # no stale results from an earlier run in the tables
    continue
  fi
  t0=$SECONDS
  if "$dir/bench/$exe" --benchmark_min_time="$min_time" --benchmark_repetitions="$repetitions" \
       --benchmark_enable_random_interleaving=true --benchmark_out="$json" \
       --benchmark_out_format=json >"$dir/$exe.log" 2>&1; then
    echo "ran: $exe ($((SECONDS - t0)) s; console output in $dir/$exe.log)"
    results+=("$json")
  else
    tail -20 "$dir/$exe.log"
    echo "bench: $exe failed"
    status=1
  fi
done
echo "bench: all benchmarks took $((SECONDS - start)) s"
echo

# The plot needs Debian's matplotlib (deps.sh installs python3-matplotlib), which a python3
# earlier on PATH (a pyenv or a venv) may not see.
python=python3
for p in python3 /usr/bin/python3; do
  if command -v "$p" >/dev/null && "$p" -c 'import matplotlib' 2>/dev/null; then python=$p; break; fi
done
if [[ ${#results[@]} -gt 0 ]]; then
  "$python" bench/report.py --markdown "$out/results.md" --svg "$out/pool.svg" --threads-svg "$out/threads.svg" \
    "${results[@]}" || status=1
fi
exit $status
