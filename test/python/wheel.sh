#!/usr/bin/env bash
# The Python module the ways a Python user takes it, without any network: from a scratch clone of
# the committed tree, `pip wheel` builds a wheel through meson-python, which must hold the package
# and nothing of the C++ install; `pip install --target` installs it and the README's Python
# example runs against it; and `meson install` of a build puts the package in the interpreter's
# site-packages under its prefix. Outside a git checkout: skipped (77).
# Usage: wheel.sh SLUICE_SOURCE_ROOT PYTHON MESON
set -euo pipefail
root=$1 python=$2 meson=$3
git -C "$root" rev-parse --git-dir >/dev/null 2>&1 || { echo "not a git checkout: skipped"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
unset CXXFLAGS LDFLAGS
quiet() { "$@" >"$work/log" 2>&1 || { tail -60 "$work/log"; echo "failed: $*"; exit 1; }; }

git clone -q "$root" "$work/sluice"
quiet "$python" -m pip wheel "$work/sluice" --no-build-isolation --no-deps --no-index -w "$work/wheels"
wheel=$(find "$work/wheels" -name 'sluice-*.whl')
"$python" - "$wheel" <<'PY'
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
package = [n for n in names if "/sluice/" in n or n.startswith("sluice/")]
assert any(n.endswith(".so") for n in package), names
assert any(n.endswith("__init__.py") for n in package) and any(n.endswith("__init__.pyi") for n in package), names
stray = [n for n in names if not (n in package or ".dist-info/" in n)]
assert not stray, f"the wheel holds more than the module: {stray}"
PY
echo "built $(basename "$wheel"): the package alone"

quiet "$python" -m pip install --no-deps --no-index --target "$work/site" "$wheel"
"$python" "$root/test/install/extract.py" "$root/README.md" python >"$work/example.py"
(cd "$work" && quiet env PYTHONPATH="$work/site" "$python" example.py)
echo "pip installed it, and the README's example runs against it"

# Configured as meson-python configured the wheel's build (its -D options, pyproject.toml's, and
# a build folder as deep below the sources, so that every compiler command is the same): ccache,
# where Meson finds it, then serves this build's objects from the wheel's.
quiet "$meson" setup "$work/sluice/.install/build" "$work/sluice" --prefix="$work/prefix" -Ddebug=false \
  -Doptimization=2 -Dpython=enabled -Dlibrary_install=false -Dtests=disabled -Dexamples=disabled
quiet "$meson" install -C "$work/sluice/.install/build"
site=$(dirname "$(find "$work/prefix" -name '_sluice*.so')")
[[ -f $site/__init__.py && $(basename "$site") == sluice ]] || { echo "no package sluice under the prefix"; exit 1; }
(cd "$work" && quiet env PYTHONPATH="$(dirname "$site")" "$python" example.py)
echo "meson install put it in $(realpath --relative-to="$work/prefix" "$(dirname "$site")"), where it imports"
