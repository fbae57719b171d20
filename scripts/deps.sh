#!/usr/bin/env bash
# Installs, from Debian 12's packages, what sluice needs and this machine lacks, for each word
# given: a mode of scripts/test.sh, a test suite, bench, or profile.
#   scripts/deps.sh plain unit concurrency   what the contributor's loop needs in its plain mode
#   scripts/deps.sh bench                    the benchmark suite and the allocators it compares with
set -euo pipefail

# Every build: the compiler, the build tools, doctest, Python for the scripts, and ccache, which
# scripts/test.sh puts before every compiler.
packages=(g++ meson ninja-build pkg-config python3 doctest-dev ccache)
for word in "$@"; do
  case $word in
    clang | clang-tsan) packages+=(clang libclang-rt-14-dev) ;;
    clang-libc++ | clang-libc++-tsan) packages+=(clang libclang-rt-14-dev libc++-14-dev libc++abi-14-dev) ;;
    # A cross compiler and qemu to run what it builds; CMake finds doctest for the cross build.
    aarch64) packages+=(g++-aarch64-linux-gnu qemu-user cmake) ;;
    riscv64) packages+=(g++-riscv64-linux-gnu qemu-user cmake) ;;
    model) packages+=(relacy-dev) ;;  # Relacy, header-only, which test/relacy runs the library under
    fuzz) packages+=(clang libclang-rt-14-dev) ;;  # libFuzzer comes with Clang's runtime
    packaging) packages+=(git cmake python3-mesonpy python3-pip) ;;  # dist clones; install finds sluice through CMake; wheel builds the Python module's
    python) packages+=(python3-dev pybind11-dev python3-pytest python3-pytest-timeout) ;;  # the module and its tests
    # Standalone Asio and Boost 1.81 (Boost.Asio with cancellation slots), header-only, for
    # asio_test and boost_asio_test; bench takes the same Boost, so that the two words agree.
    # libboost1.81-dev conflicts with Debian's default libboost-dev (1.74): apt removes 1.74 and
    # what depends on it (python3-scipy, through python3-pythran).
    concurrency) packages+=(libasio-dev libboost1.81-dev) ;;
    # python3-munkres: matplotlib's fonttools takes it in place of scipy, which needs Boost 1.74.
    bench) packages+=(libbenchmark-dev libboost1.81-dev libasio-dev libmimalloc-dev libjemalloc-dev libtbb-dev
                      python3-munkres python3-matplotlib) ;;
    profile) packages+=(linux-perf) ;;  # scripts/profile.sh: perf, on a software clock
  esac
done

missing=()
for p in "${packages[@]}"; do
  [[ " ${missing[*]} " == *" $p "* ]] && continue  # two words may name one package
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

echo "deps: installing ${missing[*]}"
sudo=()
[[ $(id -u) -eq 0 ]] || sudo=(sudo)
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
