#!/usr/bin/env bash
# The test suite.
#   bash scripts/test.sh           the loop to run after every change: the unit and concurrency
#                                  suites, with GCC plain and under ThreadSanitizer (Boost.Asio's
#                                  twin and many_threads plain only)
#   bash scripts/test.sh all       the full matrix, which CI runs: nine modes (GCC plain, under
#                                  ThreadSanitizer, under ASan+UBSan; Clang 14 plain and under
#                                  ThreadSanitizer, on libstdc++ and on libc++; GCC for aarch64
#                                  and riscv64 under qemu), each with the suites its proof needs
#   bash scripts/test.sh MODE...   the full matrix's named modes alone, in that order
# Each mode installs the Debian packages it lacks (scripts/deps.sh), builds only what its tests
# need, and runs them. Exits non-zero if any test fails; ends with one line "N passed, N failed"
# summed over the modes that ran.
set -uo pipefail
cd "$(dirname "$0")/.."

export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 allocator_may_return_null=1"
export ASAN_OPTIONS="detect_leaks=1 abort_on_error=1 allocator_may_return_null=1"
export UBSAN_OPTIONS="halt_on_error=1 print_stacktrace=1"

all_modes=(plain tsan asan clang clang-tsan clang-libc++ clang-libc++-tsan aarch64 riscv64)
declare -A sanitize=([plain]=none [tsan]=thread [asan]=address,undefined [clang]=none [clang-tsan]=thread
                     [clang-libc++]=none [clang-libc++-tsan]=thread [aarch64]=none [riscv64]=none)
declare -A compiler=([plain]=g++ [tsan]=g++ [asan]=g++ [clang]=clang++-14 [clang-tsan]=clang++-14
                     [clang-libc++]=clang++-14 [clang-libc++-tsan]=clang++-14 [aarch64]=aarch64-linux-gnu-g++
                     [riscv64]=riscv64-linux-gnu-g++)
# The plain mode builds sluice as a shared library, so that the dlopen test (a plugin that uses
# sluice, loaded and unloaded at run time) runs; the others build it static, as most users link it.
declare -A library=([plain]=shared)
# The libc++ modes compile and link against LLVM's standard library. libc++ 14 has no
# <memory_resource>, so there the library is built without pool_resource and the tests leave it
# out (lib/meson.build); everything else, doctest included, builds with it.
declare -A stdlib=([clang-libc++]=-stdlib=libc++ [clang-libc++-tsan]=-stdlib=libc++)
# A cross mode's Meson cross file, which names its compiler (Meson then leaves CXX to the build
# machine) and the emulator its tests run under; and how many times their timeouts the tests get
# there, since qemu runs the suite's longest tests 6 to 18 times slower. The cross files run each
# test on one host CPU: qemu 7.2 lets a seq_cst store and a later seq_cst load reorder across the
# host's cores (a lost wake-up hung many_threads for 45 minutes in CI), which ARM forbids. So the
# cross modes prove the build and the code paths on ARM and RISC-V, not those machines' weak
# memory ordering (docs/verification.md).
declare -A cross=([aarch64]=cross/aarch64-linux-gnu.ini [riscv64]=cross/riscv64-linux-gnu.ini)
declare -A timeout_multiplier=([aarch64]=3 [riscv64]=3)
# Every mode builds with -O2 and line tables but ASan+UBSan, with -O1, as both sanitizers'
# manuals suggest: its build, the matrix's costliest, is a third shorter (at -O2 the Asio tests
# took 111 CPU seconds each to compile there, at -O1 78). The same sanitizers, but UBSan's
# object-size check sees only the bounds the optimizer works out, fewer where -O1 inlines less
# (a helper's out-of-bounds read: caught inlined at -O2, not at -O1); ASan checks those accesses
# too.
declare -A optimization=([asan]=1)

# What each mode of the full matrix runs: suites (test/meson.build names them), then tests left out.
# - plain runs everything; fuzz and packaging build with the machine's own compilers whatever the
#   mode, so they run there alone, and Relacy builds only with GCC and no sanitizer.
# - The Python module's tests (python) run plain and under ASan+UBSan, the sanitizers an
#   interpreter built without them allows (the runtime preloaded); ThreadSanitizer would need the
#   interpreter built with it.
# - The deterministic schedules (model) run one thread at a time, each handing the turn to the
#   next, so ThreadSanitizer sees every access ordered and can find nothing there: the
#   ThreadSanitizer modes leave them out. ASan+UBSan and the second compiler keep them. So with
#   asio_both, one thread on both Asios (its claim: they build and serve together in one
#   program), where no data race can arise, and no lock-order inversion either (the gate's waiter
#   lock is never held while another is taken, detail/asio_admit.hpp); asio and boost_asio keep
#   each Asio's threads under ThreadSanitizer. It would cost those modes 11 CPU seconds of
#   compiling. limit_sim (the limiter's simulation, bench/) is one thread in simulated time:
#   nothing for ThreadSanitizer to see, and under qemu-aarch64 it takes 40 s to reproduce the
#   figures it gives natively (its output was compared byte for byte once: docs/bench/limit.md).
# - aarch64 runs what proves the build and every code path on ARM: the unit, concurrency and
#   example suites and lincheck (deterministic and Relacy prove interleavings, which do not
#   depend on the machine). riscv64, the second cross mode, the unit suite alone: it proves the
#   build and every primitive's paths on RISC-V in about a minute under qemu.
declare -A suites=(
  [plain]=unit,concurrency,model,fuzz,packaging,example,python
  [tsan]=unit,concurrency,model,example [asan]=unit,concurrency,model,example,python
  [clang]=unit,concurrency,model,example [clang-tsan]=unit,concurrency,model,example
  [clang-libc++]=unit,concurrency,model,example [clang-libc++-tsan]=unit,concurrency,model,example
  [aarch64]=unit,concurrency,model,example [riscv64]=unit)
det=deterministic,deterministic_fork,deterministic_trim  # the deterministic schedules' three tests
declare -A skip=([tsan]=$det,asio_both,limit_sim [clang-tsan]=$det,asio_both,limit_sim
                 [clang-libc++-tsan]=$det,asio_both,limit_sim [aarch64]=$det,limit_sim)

if (($# == 0)); then  # the contributor's loop
  modes=(plain tsan)
  for mode in "${modes[@]}"; do suites[$mode]=unit,concurrency; done
  # Two tests run plain here and under ThreadSanitizer in the matrix: Boost.Asio's twin of the
  # asio test (the same file on Boost's Asio; 26 CPU seconds of compiling under the sanitizer),
  # and many_threads (46 to 68 s alone under it, most of the loop's ThreadSanitizer time; plain,
  # it runs up to 1,024 threads). A change to the pool's seats or CPU caches: run
  # `bash scripts/test.sh tsan` as well.
  skip[tsan]+=,boost_asio,many_threads
elif [[ $1 == all && $# == 1 ]]; then
  modes=("${all_modes[@]}")
else
  for mode in "$@"; do
    [[ -n ${compiler[$mode]:-} ]] || { echo "no mode $mode; the modes: ${all_modes[*]}, or all"; exit 2; }
  done
  modes=("$@")
fi

# Compiler output is cached by ccache (scripts/deps.sh installs it; CCACHE_DIR, by default
# ~/.cache/ccache, keeps it between runs): a mode rebuilt after a change, or the matrix run again
# on a machine that keeps its cache, recompiles only what changed. A cold cache (a fresh CI
# machine) saves little, since no two modes compile the same sources with the same flags.
# SLUICE_CCACHE=0 builds without it. The test builds carry line tables alone (-g1: file and line
# in every sanitizer report and backtrace, inlined frames included, at a fifth less compile time
# than -g); `meson configure build-test-MODE -Dcpp_args=...` without it gives a debugger more.
# Each mode runs its tests side by side, as many at once as the machine has cores (meson test
# --num-processes; SLUICE_TEST_JOBS overrides it); the tests whose results depend on having the
# cores to themselves (timing, hit rates, time budgets, overlapping calls) are marked
# is_parallel : false in their meson.build and run alone (CONTRIBUTING.md lists them).
jobs=${SLUICE_TEST_JOBS:-$(nproc)}
# The CPU seconds this script's finished children have used (their user and system time), which
# the report sets beside each phase's wall time: less noisy than the wall on a shared machine.
cpu() { awk -v hz="$(getconf CLK_TCK)" '{printf "%d", ($16 + $17) / hz}' "/proc/$$/stat"; }
ccache_stats() { ccache --print-stats 2>/dev/null | awk '/^(direct|preprocessed)_cache_hit/ {h += $2} /^cache_miss/ {m += $2} END {print h + 0, m + 0}'; }

status=0
ran=()
read -r hits_before misses_before < <(ccache_stats)
for mode in "${modes[@]}"; do
  dir=build-test-$mode
  start=$SECONDS
  echo "== $mode (${suites[$mode]//,/, })"
  rm -f "$dir.times" "$dir/meson-logs/testlog.json"  # a log left by an earlier run is not this run's result
  ran+=("$mode")
  scripts/deps.sh "$mode" ${suites[$mode]//,/ } || { echo "$mode: installing its packages failed"; status=1; continue; }
  launcher=()
  [[ ${SLUICE_CCACHE:-1} != 0 ]] && command -v ccache >/dev/null && launcher=(ccache)
  reconfigure=()
  [[ -f $dir/build.ninja ]] && reconfigure=(--reconfigure)
  machine=()
  if [[ -n ${cross[$mode]:-} ]]; then
    machine=(--cross-file "${cross[$mode]}")
    if ((${#launcher[@]})); then  # the cross file names the compiler: a second one puts ccache before it
      mkdir -p "$dir"
      printf "[binaries]\ncpp = ['ccache', '%s']\n" "${compiler[$mode]}" >"$dir.ccache.ini"
      machine+=(--cross-file "$dir.ccache.ini")
    fi
  fi
  link=()
  [[ -n ${stdlib[$mode]:-} ]] && link=(-Dcpp_link_args="${stdlib[$mode]}")
  python=(); [[ ,${suites[$mode]}, == *,python,* ]] && python=(-Dpython=enabled)  # else auto
  CXX="${launcher[*]} ${compiler[$mode]}" meson setup "$dir" "${reconfigure[@]}" "${machine[@]}" "${python[@]}" \
    -Doptimization="${optimization[$mode]:-2}" -Ddebug=true -Ddefault_library="${library[$mode]:-static}" -Dtests=enabled \
    -Db_sanitize="${sanitize[$mode]}" -Dcpp_args="-g1 -fno-sanitize-recover=undefined ${stdlib[$mode]:-}" "${link[@]}" \
    >"$dir.setup.log" 2>&1 || { tail -20 "$dir.setup.log"; echo "$mode: configure failed"; status=1; continue; }
  { read -ra tests; read -ra targets; } < <(python3 scripts/select_tests.py "$dir" "${suites[$mode]}" "${skip[$mode]:-}")
  built=$SECONDS built_cpu=$(cpu)
  ((${#targets[@]} == 0)) || ninja -C "$dir" "${targets[@]}" >/dev/null ||
    { ninja -C "$dir" "${targets[@]}" | tail -30; echo "$mode: build failed"; status=1; continue; }
  tested=$SECONDS tested_cpu=$(cpu)
  if meson test -C "$dir" --no-rebuild --print-errorlogs --num-processes "$jobs" \
       --timeout-multiplier "${timeout_multiplier[$mode]:-1}" "${tests[@]}" >"$dir.test.log" 2>&1; then
    grep -E '^ *[0-9]+/[0-9]+ ' "$dir.test.log"
  else
    grep -E '^ *[0-9]+/[0-9]+ ' "$dir.test.log"
    tail -60 "$dir.test.log"  # this mode's failure, and only this mode's
    echo "$mode: tests failed (the whole log: $dir.test.log)"
    status=1
  fi
  printf 'setup %d\nbuild %d\ntest %d\nbuild_cpu %d\ntest_cpu %d\nload %s\n' $((built - start)) \
    $((tested - built)) $((SECONDS - tested)) $((tested_cpu - built_cpu)) $(($(cpu) - tested_cpu)) \
    "$(cut -d' ' -f1-3 /proc/loadavg)" >"$dir.times"
  echo "$mode: $((SECONDS - start)) s (set-up $((built - start)), build $((tested - built)), tests $((SECONDS - tested)))"
done

python3 scripts/report_times.py "${ran[@]}"
read -r hits misses < <(ccache_stats)
((hits + misses > hits_before + misses_before)) &&
  echo "ccache: $((hits - hits_before)) hits, $((misses - misses_before)) misses (every compile on this machine meanwhile)"
python3 scripts/count_tests.py "${modes[@]/#/build-test-}" || status=1
exit $status
