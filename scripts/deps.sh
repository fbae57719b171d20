#!/usr/bin/env bash
# Installs, from Debian 12's packages, what sluice needs and this machine lacks.
#   scripts/deps.sh test    the build, the test suite and its sanitizers
#   scripts/deps.sh bench   that, plus the allocators and plotting the benchmark compares with
set -euo pipefail

# The tests: the compilers (clang and its runtime for the fuzzer; the aarch64 cross compiler, and
# qemu to run what it builds), the build tools, git, CMake and pkg-config for the install tests
# (CMake also finds doctest for the cross build), and doctest.
packages=(g++ clang libclang-rt-14-dev g++-aarch64-linux-gnu qemu-user meson ninja-build pkg-config cmake
          python3 git doctest-dev)
# libc++ for the clang-libc++ mode; the riscv64 cross compiler (run under the same qemu-user).
packages+=(libc++-14-dev libc++abi-14-dev g++-riscv64-linux-gnu)
# Relacy, the relaxed-memory model checker that test/relacy runs the library under (header-only).
packages+=(relacy-dev)
if [[ ${1:-test} == bench ]]; then
  packages+=(libbenchmark-dev libboost-dev libmimalloc-dev libjemalloc-dev libtbb-dev python3-matplotlib)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

echo "deps: installing ${missing[*]}"
sudo=()
[[ $(id -u) -eq 0 ]] || sudo=(sudo)
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
