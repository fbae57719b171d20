#!/usr/bin/env bash
# Builds test/consumer in a scratch folder with this checkout as its subprojects/sluice (only
# what a user's copy would hold: the build files, include/ and lib/), and runs its test.
# Usage: run.sh SLUICE_SOURCE_ROOT MESON
set -euo pipefail
root=$1 meson=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "$root/test/consumer/." "$work/"
mkdir -p "$work/subprojects/sluice"
cp -r "$root/meson.build" "$root/meson_options.txt" "$root/include" "$root/lib" "$work/subprojects/sluice/"
cd "$work"
env -u CXXFLAGS -u LDFLAGS "$meson" setup build >setup.log 2>&1 || { cat setup.log; exit 1; }
grep -q 'Subproject sluice finished' setup.log || { echo "sluice was not taken as a subproject"; cat setup.log; exit 1; }
"$meson" compile -C build >compile.log 2>&1 || { cat compile.log; exit 1; }
"$meson" test -C build --print-errorlogs
