#!/usr/bin/env bash
# The whole test suite, five times: with GCC plain, under ThreadSanitizer, and under
# AddressSanitizer with UndefinedBehaviorSanitizer (LeakSanitizer on); with Clang 14 plain and
# under ThreadSanitizer. Exits non-zero if any test fails in any mode; ends with one line
# "N passed, N failed" summed over the modes.
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh test || exit 1

export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 allocator_may_return_null=1"
export ASAN_OPTIONS="detect_leaks=1 abort_on_error=1 allocator_may_return_null=1"
export UBSAN_OPTIONS="halt_on_error=1 print_stacktrace=1"

# Each mode: its sanitizer and compiler. The Clang modes keep the suite true on a second
# compiler; they leave out the tests that do not depend on it (consumer, install, dist and the
# fuzzer, which builds itself with clang anyway), which the plain mode runs.
modes=(plain tsan asan clang clang-tsan)
declare -A sanitize=([plain]=none [tsan]=thread [asan]=address,undefined [clang]=none [clang-tsan]=thread)
declare -A compiler=([plain]=g++ [tsan]=g++ [asan]=g++ [clang]=clang++-14 [clang-tsan]=clang++-14)
compiler_independent='^(consumer|install|dist|fuzz_differential)$'
status=0
times=()
for mode in "${modes[@]}"; do
  dir=build-test-$mode
  start=$SECONDS
  echo "== $mode"
  reconfigure=()
  [[ -f $dir/build.ninja ]] && reconfigure=(--reconfigure)
  CXX=${compiler[$mode]} meson setup "$dir" "${reconfigure[@]}" --buildtype=debugoptimized \
    -Ddefault_library=static -Dbenchmarks=false -Db_sanitize="${sanitize[$mode]}" \
    -Dcpp_args=-fno-sanitize-recover=undefined \
    >"$dir.setup.log" 2>&1 || { tail -20 "$dir.setup.log"; echo "$mode: configure failed"; status=1; continue; }
  ninja -C "$dir" >/dev/null || { ninja -C "$dir" | tail -30; echo "$mode: build failed"; status=1; continue; }
  tests=()
  if [[ ${compiler[$mode]} != g++ ]]; then
    mapfile -t tests < <(meson test -C "$dir" --list 2>/dev/null | grep -vE "$compiler_independent" | grep -v '^ninja:')
  fi
  if meson test -C "$dir" --print-errorlogs --num-processes 1 "${tests[@]}" >"$dir.test.log" 2>&1; then
    grep -E '^ *[0-9]+/[0-9]+ ' "$dir.test.log"
  else
    grep -E '^ *[0-9]+/[0-9]+ ' "$dir.test.log"
    tail -60 "$dir.test.log"  # this mode's failure, and only this mode's
    echo "$mode: tests failed (the whole log: $dir.test.log)"
    status=1
  fi
  echo "$mode: $((SECONDS - start)) s, build included"
  times+=("$mode $((SECONDS - start)) s")
done

printf -v joined '%s, ' "${times[@]}"
echo "modes, each with its build: ${joined%, }"

python3 scripts/count_tests.py "${modes[@]/#/build-test-}" || status=1
exit $status
