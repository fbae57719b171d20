#!/usr/bin/env bash
# Reproduces a fact the README cites, from this repository alone.
#   scripts/reproduce.sh boost-stack   boost::lockfree::stack under ThreadSanitizer: reports races
set -uo pipefail
cd "$(dirname "$0")/.."
case ${1:-} in
  boost-stack)
    scripts/deps.sh bench >/dev/null || exit 1
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    g++ -std=c++20 -O1 -g -fsanitize=thread docs/claims/boost_stack_tsan.cpp -o "$work/stack" -pthread || exit 1
    echo "Boost $(grep -m1 '#define BOOST_LIB_VERSION' /usr/include/boost/version.hpp | cut -d'"' -f2)"
    TSAN_OPTIONS=halt_on_error=0 "$work/stack" >"$work/log" 2>&1
    reports=$(grep -c 'WARNING: ThreadSanitizer: data race' "$work/log")
    grep -m1 -A6 'WARNING: ThreadSanitizer' "$work/log"
    echo "boost-stack: $reports ThreadSanitizer data-race reports in a 4-thread push/pop loop"
    [[ $reports -gt 0 ]]
    ;;
  *)
    sed -n '2,3p' "$0"
    exit 2
    ;;
esac
