#!/usr/bin/env bash
# `meson dist` makes a release tarball that builds and installs: from a scratch clone of the
# committed tree, meson dist makes the tarball (without running the suite inside it: the other
# tests run that suite on the same sources); the tarball is unpacked, built, installed into a
# scratch prefix, and the README's quickstart program builds against that install through
# pkg-config and runs. Inside a tarball this test has no git repository to clone: skipped (77).
# Usage: run.sh SLUICE_SOURCE_ROOT MESON
set -euo pipefail
root=$1 meson=$2
git -C "$root" rev-parse --git-dir >/dev/null 2>&1 || { echo "not a git checkout: skipped"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
unset CXXFLAGS LDFLAGS
quiet() { "$@" >"$work/log" 2>&1 || { tail -60 "$work/log"; echo "failed: $*"; exit 1; }; }

git clone -q "$root" "$work/sluice"
quiet "$meson" setup "$work/build" "$work/sluice" -Dtests=disabled -Dexamples=disabled -Dpython=disabled
quiet "$meson" dist -C "$work/build" --formats xztar --no-tests
tarball=$(find "$work/build/meson-dist" -name '*.tar.xz')
echo "made $(basename "$tarball")"

mkdir "$work/unpacked"
tar -xf "$tarball" -C "$work/unpacked"
source=$(find "$work/unpacked" -mindepth 1 -maxdepth 1 -type d)
quiet "$meson" setup "$work/from-tarball" "$source" --prefix="$work/prefix" -Ddefault_library=static \
  -Dtests=disabled -Dexamples=disabled -Dpython=disabled  # the module: the python_wheel test
quiet "$meson" install -C "$work/from-tarball"
echo "built and installed from the tarball"

python3 "$root/test/install/extract.py" "$root/README.md" quickstart >"$work/router.cpp"
export PKG_CONFIG_PATH
PKG_CONFIG_PATH=$(dirname "$(find "$work/prefix" -name sluice.pc)")
# shellcheck disable=SC2046
quiet c++ -std=c++20 "$work/router.cpp" $(pkg-config --cflags --libs --static sluice) -o "$work/router"
quiet "$work/router"
echo "the README's quickstart builds against the tarball's install and runs"
