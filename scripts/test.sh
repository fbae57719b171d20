#!/usr/bin/env bash
# The whole test suite, in nine modes: with GCC plain, under ThreadSanitizer, and under
# AddressSanitizer with UndefinedBehaviorSanitizer (LeakSanitizer on); with Clang 14 plain and
# under ThreadSanitizer, on libstdc++ and on libc++ 14; cross-built with GCC for aarch64,
# run under qemu; and a subset of it cross-built for riscv64, run under qemu. Exits non-zero if
# any test fails in any mode; ends with one line "N passed, N failed" summed over the modes.
# Modes named as arguments run alone, in that order: bash scripts/test.sh clang-libc++ riscv64
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh test || exit 1

export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 allocator_may_return_null=1"
export ASAN_OPTIONS="detect_leaks=1 abort_on_error=1 allocator_may_return_null=1"
export UBSAN_OPTIONS="halt_on_error=1 print_stacktrace=1"

# Each mode: its sanitizer and compiler. The Clang modes keep the suite true on a second
# compiler (clang-libc++ also on a second standard library), the cross modes on other
# architectures; they leave out the tests that do not depend on either (consumer, install, dist
# and the fuzzer, which build with the build machine's own compilers anyway), which the plain
# mode runs.
modes=(plain tsan asan clang clang-tsan clang-libc++ clang-libc++-tsan aarch64 riscv64)
declare -A sanitize=([plain]=none [tsan]=thread [asan]=address,undefined [clang]=none [clang-tsan]=thread
                     [clang-libc++]=none [clang-libc++-tsan]=thread [aarch64]=none [riscv64]=none)
declare -A compiler=([plain]=g++ [tsan]=g++ [asan]=g++ [clang]=clang++-14 [clang-tsan]=clang++-14
                     [clang-libc++]=clang++-14 [clang-libc++-tsan]=clang++-14 [aarch64]=aarch64-linux-gnu-g++
                     [riscv64]=riscv64-linux-gnu-g++)
# The libc++ mode compiles and links against LLVM's standard library. libc++ 14 has no
# <memory_resource>, so there the library is built without pool_resource and the tests leave it
# out (lib/meson.build); everything else, doctest included, builds with it.
declare -A stdlib=([clang-libc++]=-stdlib=libc++ [clang-libc++-tsan]=-stdlib=libc++)
# A cross mode's Meson cross file, which names its compiler (Meson then leaves CXX to the build
# machine) and the emulator its tests run under; and how many times their timeouts the tests get
# there, since qemu runs the suite's longest tests 6 to 18 times slower (hostile_test, 300 s
# allowed, takes 220 to 280 s under it). qemu on x86 keeps x86's ordering, so the aarch64 mode
# proves the build and the code paths on ARM, not ARM's weak memory ordering (docs/verification.md).
declare -A cross=([aarch64]=cross/aarch64-linux-gnu.ini [riscv64]=cross/riscv64-linux-gnu.ini)
declare -A timeout_multiplier=([aarch64]=3 [riscv64]=3)
# A mode that runs only some tests, and builds only what they need. riscv64 runs the unit suites
# (test/meson.build's suites but hostile and stress), which prove the build and every
# primitive's code paths there in about a minute under qemu; the aarch64 mode already runs the
# whole suite under qemu (about 12 minutes), and doing so again would push the test command
# towards an hour on a 2-core machine. Each name here is a test and its executable test/<name>_test.
declare -A subset=([riscv64]='pool pool_cache many_threads lifecycle pool_resource gate gate_wait fork_wait memory')
if (($# > 0)); then
  for mode in "$@"; do
    [[ -n ${compiler[$mode]:-} ]] || { echo "no mode $mode; the modes: ${modes[*]}"; exit 2; }
  done
  modes=("$@")
fi
compiler_independent='^(consumer|install|dist|fuzz_differential)$'
status=0
times=()
for mode in "${modes[@]}"; do
  dir=build-test-$mode
  start=$SECONDS
  echo "== $mode"
  rm -f "$dir/meson-logs/testlog.json"  # a log left by an earlier run is not this run's result
  reconfigure=()
  [[ -f $dir/build.ninja ]] && reconfigure=(--reconfigure)
  machine=()
  [[ -n ${cross[$mode]:-} ]] && machine=(--cross-file "${cross[$mode]}")
  library=()
  [[ -n ${stdlib[$mode]:-} ]] && library=(-Dcpp_link_args="${stdlib[$mode]}")
  CXX=${compiler[$mode]} meson setup "$dir" "${reconfigure[@]}" "${machine[@]}" --buildtype=debugoptimized \
    -Ddefault_library=static -Dbenchmarks=false -Db_sanitize="${sanitize[$mode]}" \
    -Dcpp_args="-fno-sanitize-recover=undefined ${stdlib[$mode]:-}" "${library[@]}" \
    >"$dir.setup.log" 2>&1 || { tail -20 "$dir.setup.log"; echo "$mode: configure failed"; status=1; continue; }
  tests=() targets=()
  if [[ -n ${subset[$mode]:-} ]]; then
    read -ra tests <<<"${subset[$mode]}"
    for t in "${tests[@]}"; do targets+=("test/${t}_test"); done
  fi
  ninja -C "$dir" "${targets[@]}" >/dev/null ||
    { ninja -C "$dir" "${targets[@]}" | tail -30; echo "$mode: build failed"; status=1; continue; }
  if [[ -z ${subset[$mode]:-} && ${compiler[$mode]} != g++ ]]; then
    mapfile -t tests < <(meson test -C "$dir" --list 2>/dev/null | grep -vE "$compiler_independent" | grep -v '^ninja:')
  fi
  if meson test -C "$dir" --print-errorlogs --num-processes 1 \
       --timeout-multiplier "${timeout_multiplier[$mode]:-1}" "${tests[@]}" >"$dir.test.log" 2>&1; then
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
