#!/usr/bin/env bash
# The whole test suite, three times: plain, under ThreadSanitizer, and under AddressSanitizer
# with UndefinedBehaviorSanitizer (LeakSanitizer on). Exits non-zero if any test fails in any
# mode; ends with one line "N passed, N failed" summed over the modes.
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh test || exit 1

export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 allocator_may_return_null=1"
export ASAN_OPTIONS="detect_leaks=1 abort_on_error=1 allocator_may_return_null=1"
export UBSAN_OPTIONS="halt_on_error=1 print_stacktrace=1"

declare -A sanitize=([plain]=none [tsan]=thread [asan]=address,undefined)
status=0
for mode in plain tsan asan; do
  dir=build-test-$mode
  echo "== $mode"
  reconfigure=()
  [[ -f $dir/build.ninja ]] && reconfigure=(--reconfigure)
  meson setup "$dir" "${reconfigure[@]}" --buildtype=debugoptimized -Ddefault_library=static \
    -Dbenchmarks=false -Db_sanitize="${sanitize[$mode]}" -Dcpp_args=-fno-sanitize-recover=undefined \
    >"$dir.setup.log" 2>&1 || { tail -20 "$dir.setup.log"; echo "$mode: configure failed"; status=1; continue; }
  ninja -C "$dir" >/dev/null || { ninja -C "$dir" | tail -30; echo "$mode: build failed"; status=1; continue; }
  if meson test -C "$dir" --print-errorlogs --num-processes 1 >"$dir.test.log" 2>&1; then
    grep -E '^ *[0-9]+/[0-9]+ ' "$dir.test.log"
  else
    grep -E '^ *[0-9]+/[0-9]+ ' "$dir.test.log"
    tail -60 "$dir.test.log"  # this mode's failure, and only this mode's
    echo "$mode: tests failed (the whole log: $dir.test.log)"
    status=1
  fi
done

python3 scripts/count_tests.py build-test-plain build-test-tsan build-test-asan || status=1
exit $status
