#!/usr/bin/env bash
# `meson dist` makes a release tarball whose own tests pass: from a scratch clone of the
# committed tree, meson dist builds the tarball, unpacks it, and runs its test suite (plain).
# Inside that tarball this test has no git repository to clone, and is skipped (77).
# Usage: run.sh SLUICE_SOURCE_ROOT MESON
set -euo pipefail
root=$1 meson=$2
git -C "$root" rev-parse --git-dir >/dev/null 2>&1 || { echo "not a git checkout: skipped"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
unset CXXFLAGS LDFLAGS
git clone -q "$root" "$work/sluice"
"$meson" setup "$work/build" "$work/sluice" -Dbenchmarks=false >"$work/setup.log" 2>&1 || { cat "$work/setup.log"; exit 1; }
"$meson" dist -C "$work/build" --formats xztar >"$work/dist.log" 2>&1 || { tail -60 "$work/dist.log"; exit 1; }
grep -E '^ *[0-9]+/[0-9]+ ' "$work/dist.log"
grep -E 'Created .*tar.xz' "$work/dist.log"
