#!/usr/bin/env bash
# Builds the differential fuzz target with clang (libFuzzer, AddressSanitizer, UBSan) and runs
# it over the committed corpus, then fuzzes for a while. The Meson test fuzz_differential runs it
# (plain builds) with the library's sources from lib/meson.build, the one list of them:
#   test/fuzz/run.sh SECONDS WORKDIR SOURCE...
# SLUICE_FUZZ_SECONDS overrides SECONDS, for a longer run through Meson (README.md here).
# Every input of test/fuzz/corpus and of WORKDIR/corpus runs first; then libFuzzer mutates for
# SECONDS (0: replay only). New inputs go to WORKDIR/corpus (never to the committed corpus), a
# failing input to WORKDIR/crash-*. Prints one line "fuzz_differential: N executions in S s ..."
# and exits non-zero on any crash, difference, sanitizer report, leak or timeout. The target is
# rebuilt when a source is newer than it.
# CXX_FUZZ names the compiler (default: clang++-14, else clang++).
set -euo pipefail
[[ $# -ge 3 && $1 =~ ^[0-9]+$ ]] || { echo "usage: $0 SECONDS WORKDIR SOURCE..."; exit 2; }
seconds=${SLUICE_FUZZ_SECONDS:-$1}
[[ $seconds =~ ^[0-9]+$ ]] || { echo "SLUICE_FUZZ_SECONDS: a number of seconds"; exit 2; }
seconds=$((10#$seconds))
limit=(-max_total_time="$seconds")
[[ $seconds -eq 0 ]] && limit=(-runs=0)  # libFuzzer reads max_total_time=0 as "no limit"
root=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$2/corpus"
work=$(cd "$2" && pwd)
sources=()
for s in "${@:3}"; do sources+=("$(realpath "$s")"); done
sources+=("$root/test/fuzz/differential.cpp")
cd "$root"

cxx=${CXX_FUZZ:-}
if [[ -z $cxx ]]; then
  for c in clang++-14 clang++; do
    if command -v "$c" >/dev/null; then cxx=$c; break; fi
  done
fi
[[ -n $cxx ]] || { echo "fuzz_differential: no clang++ (scripts/deps.sh fuzz installs it)"; exit 1; }

bin=$work/differential
# Rebuilt when a file is newer than the target, or the list of sources changed.
listed=$(printf '%s\n' "${sources[@]}")
if [[ ! -x $bin ]] || [[ $listed != "$(cat "$bin.sources" 2>/dev/null)" ]] ||
   [[ -n $(find include lib test/fuzz/differential.cpp test/fuzz/*.hpp test/fuzz/run.sh -newer "$bin" -type f | head -1) ]]; then
  echo "fuzz_differential: building with $cxx"
  start=$SECONDS
  # Each source compiled on its own, as many at once as there are cores, through ccache where
  # it is installed (SLUICE_CCACHE=0: not), then linked.
  flags=(-std=c++20 -O1 -gline-tables-only -pthread -Wall -Wextra
         -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer)
  launcher=()
  [[ ${SLUICE_CCACHE:-1} != 0 ]] && command -v ccache >/dev/null && launcher=(ccache)
  rm -rf "$work/obj"
  mkdir -p "$work/obj"
  objects=()
  for s in "${sources[@]}"; do
    while (($(jobs -rp | wc -l) >= $(nproc))); do wait -n || true; done
    o=$work/obj/${#objects[@]}.o
    objects+=("$o")
    "${launcher[@]}" "$cxx" "${flags[@]}" -I include -c "$s" -o "$o" >"$o.log" 2>&1 &
  done
  wait
  for o in "${objects[@]}"; do
    [[ -f $o ]] || { cat "$o.log"; echo "fuzz_differential: build failed"; exit 1; }
  done
  "$cxx" "${flags[@]}" "${objects[@]}" -o "$bin.new" >"$work/build.log" 2>&1 ||
    { cat "$work/build.log"; echo "fuzz_differential: build failed"; exit 1; }
  mv "$bin.new" "$bin"
  echo "$listed" >"$bin.sources"
  echo "fuzz_differential: built in $((SECONDS - start)) s"
fi

# What scripts/test.sh exports, first, so that the caller's own settings win.
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:allocator_may_return_null=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"

log=$work/fuzz.log
seeds=$(find test/fuzz/corpus -type f | wc -l)
status=0
# -error_exitcode: libFuzzer's default (77) would read as "skipped" to meson test.
"$bin" "${limit[@]}" -timeout=10 -rss_limit_mb=2048 -max_len=2048 \
  -error_exitcode=1 -timeout_exitcode=1 -print_final_stats=1 -artifact_prefix="$work/" \
  "$work/corpus" test/fuzz/corpus >"$log" 2>&1 || status=$?

runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
time=$(sed -n 's/^Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$log" | tail -1)
grep -E '^(INFO: seed corpus|#[0-9]+[[:space:]]+(INITED|DONE))|^Done [0-9]+ runs' "$log" || true
if [[ $status -ne 0 || -z $runs ]]; then
  tail -60 "$log"
  echo "fuzz_differential: FAILED (exit $status) after ${runs:-?} executions; the input is in $work/crash-* (replay: $bin FILE, with SLUICE_FUZZ_TRACE=1 to see its calls)"
  exit 1
fi
echo "fuzz_differential: $runs executions in ${time:-$seconds} s (corpus: $seeds seeds, $(find "$work/corpus" -type f | wc -l) inputs found so far), no difference"
