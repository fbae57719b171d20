#!/usr/bin/env bash
# Every way into sluice, as the README describes them, built and run: sluice is installed into
# scratch prefixes (shared and static), then the README's quickstart program is built by a
# project that finds it through pkg-config, one through CMake's find_package(sluice) (with the
# README's CMake lines), and one through Meson's dependency('sluice') with no fallback (by
# pkg-config and by CMake); and by the README's meson.build, which takes sluice as a subproject
# through the README's wrap file, its URL pointed at a local git repository. The Python module
# is not built here (python_wheel builds and installs it): it took a third of this test's CPU time.
# Usage: run.sh SLUICE_SOURCE_ROOT MESON
set -euo pipefail
root=$1 meson=$2
here=$root/test/install
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
unset CXXFLAGS LDFLAGS

step() { echo "== $*"; }
quiet() { "$@" >"$work/log" 2>&1 || { cat "$work/log"; echo "failed: $*"; exit 1; }; }

python3 "$here/extract.py" "$root/README.md" quickstart >"$work/router.cpp"
python3 "$here/extract.py" "$root/README.md" wrap >"$work/sluice.wrap"
python3 "$here/extract.py" "$root/README.md" meson >"$work/meson.build"
python3 "$here/extract.py" "$root/README.md" cmake >"$work/cmake.txt"

for kind in shared static; do
  prefix=$work/prefix-$kind
  step "install ($kind) into a scratch prefix"
  quiet "$meson" setup "$work/build-$kind" "$root" --prefix="$prefix" --buildtype=release \
    -Ddefault_library="$kind" -Dtests=disabled -Dexamples=disabled -Dpython=disabled
  quiet "$meson" install -C "$work/build-$kind"
  # Only what users need: include/sluice as it is, with none of the test builds' seams (those
  # live under test/ and come first on those builds' include paths alone).
  diff -r "$root/include/sluice" "$prefix/include/sluice" >"$work/log" 2>&1 || { cat "$work/log"; exit 1; }
  if grep -rnE 'SLUICE_(ATOMIC_HEADER|PER_THREAD_DECLARED|PLAIN_DECLARED)|per_thread' "$prefix/include" >"$work/log"; then
    cat "$work/log"; echo "a test seam in the installed headers"; exit 1
  fi
  pcdir=$(dirname "$(find "$prefix" -name sluice.pc)")
  libdir=$(dirname "$pcdir")
  export PKG_CONFIG_PATH=$pcdir LD_LIBRARY_PATH=$libdir

  step "pkg-config ($kind)"
  static=(); [[ $kind == static ]] && static=(--static)
  # shellcheck disable=SC2046
  quiet c++ -std=c++20 "$work/router.cpp" $(pkg-config --cflags --libs "${static[@]}" sluice) \
    -o "$work/pkgconfig-$kind"
  quiet "$work/pkgconfig-$kind"

  step "CMake find_package(sluice) ($kind)"
  mkdir -p "$work/cmake-$kind"
  cat "$here/cmake/CMakeLists.txt" "$work/cmake.txt" >"$work/cmake-$kind/CMakeLists.txt"
  cp "$work/router.cpp" "$work/cmake-$kind/"
  quiet cmake -S "$work/cmake-$kind" -B "$work/cmake-$kind/build" -DCMAKE_PREFIX_PATH="$prefix"
  quiet cmake --build "$work/cmake-$kind/build"
  quiet "$work/cmake-$kind/build/router"

  step "Meson dependency('sluice'), no fallback, through pkg-config ($kind)"
  mkdir -p "$work/meson-$kind"
  cp "$here/meson/meson.build" "$work/router.cpp" "$work/meson-$kind/"
  quiet "$meson" setup "$work/meson-$kind/build" "$work/meson-$kind"
  quiet "$meson" compile -C "$work/meson-$kind/build"
  quiet "$work/meson-$kind/build/router"

  step "Meson dependency('sluice'), no fallback, through CMake ($kind)"
  unset PKG_CONFIG_PATH
  quiet "$meson" setup "$work/meson-cmake-$kind" "$work/meson-$kind" -Dcmake_prefix_path="$prefix"
  grep -q 'found: YES' "$work/log" || { cat "$work/log"; echo "sluice not found through CMake"; exit 1; }
  quiet "$meson" compile -C "$work/meson-cmake-$kind"
  quiet "$work/meson-cmake-$kind/router"
  unset LD_LIBRARY_PATH
done

step "Meson subproject through the README's wrap file"
repo=$work/sluice-repo
mkdir -p "$repo"
cp -r "$root/meson.build" "$root/meson_options.txt" "$root/LICENSE" "$root/include" "$root/lib" "$repo/"
quiet git -C "$repo" init -q -b main
quiet git -C "$repo" add -A
quiet git -C "$repo" -c user.name=test -c user.email=test@localhost commit -q -m sluice
mkdir -p "$work/wrap/subprojects"
cp "$work/meson.build" "$work/router.cpp" "$work/wrap/"  # the README's meson.build, as written
sed -e "s|^url = .*|url = file://$repo|" "$work/sluice.wrap" >"$work/wrap/subprojects/sluice.wrap"
quiet "$meson" setup "$work/wrap/build" "$work/wrap"
grep -q 'Subproject sluice finished' "$work/log" || { cat "$work/log"; echo "sluice was not taken through the wrap"; exit 1; }
quiet "$meson" compile -C "$work/wrap/build"
quiet "$work/wrap/build/router"
echo "every way in works"
