#!/usr/bin/env bash
# Installs Cohort into a fresh prefix (`cmake --install`, what `make install PREFIX=...` runs),
# checks what it holds, then builds the out-of-tree example (examples/out-of-tree) against it
# twice, with CMake (find_package(Cohort), Cohort::dist) and with pkg-config (cohort-dist), and
# runs both as 2-process jobs under the installed cohort-run.
# Usage: install_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=${1:?usage: install_test.sh SOURCE_DIR BUILD_DIR}
build=${2:?usage: install_test.sh SOURCE_DIR BUILD_DIR}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix="$work/prefix"

fail() { echo "FAIL: $*" >&2; exit 1; }

cmake --install "$build" --prefix "$prefix" >"$work/install.log" || {
  cat "$work/install.log"; fail "cmake --install failed"; }

# The promised API and nothing else: only include/dist/ is installed as headers.
headers=$(cd "$prefix/include" && find . -type f | sort)
[ "$headers" = "$(printf './dist/collectives.h\n./dist/distributed.h')" ] ||
  fail "installed headers are not just dist/: $headers"
for f in bin/cohort-run bin/cohort-launch bin/cohort-sidecar bin/cohort-operator lib/cmake/Cohort/CohortConfig.cmake \
         lib/cmake/Cohort/CohortConfigVersion.cmake lib/pkgconfig/cohort-dist.pc; do
  [ -e "$prefix/$f" ] || fail "$f was not installed"
done
ls "$prefix"/lib/libcohort_dist.so* >/dev/null || fail "libcohort_dist.so was not installed"
# cohort-launch runs inside users' images, which have none of Cohort's libraries.
if ldd "$prefix/bin/cohort-launch" >/dev/null 2>&1; then
  fail "cohort-launch is linked dynamically: $(ldd "$prefix/bin/cohort-launch" | tr '\n' ' ')"
fi
# The library exports the dist:: API only.
# (Read whole, not through `grep -q`: under pipefail a reader that stops early kills nm with SIGPIPE,
# and the check would pass on a failed pipeline.)
exports=$(nm -DC --defined-only "$prefix/lib/libcohort_dist.so")
others=$(grep -v " dist::" <<<"$exports" | grep " [TDBRVW] " || true)
if [ -n "$others" ]; then
  fail "libcohort_dist.so exports more than dist::: $(sed -n 1,10p <<<"$others" | tr '\n' ' ')"
fi

# 1. CMake: find_package(Cohort) and Cohort::dist, from a copy of the example outside the tree.
cp -r "$src/examples/out-of-tree" "$work/example"
cmake -S "$work/example" -B "$work/cmake-build" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" \
  >"$work/cmake.log" 2>&1 || { cat "$work/cmake.log"; fail "configuring with find_package(Cohort)"; }
cmake --build "$work/cmake-build" >>"$work/cmake.log" 2>&1 || {
  cat "$work/cmake.log"; fail "building with Cohort::dist"; }

# 2. pkg-config: the .pc file finds the prefix from where it lies.
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
[ "$(pkg-config --modversion cohort-dist)" = "$(cd "$build" && grep -m1 CMAKE_PROJECT_VERSION: CMakeCache.txt | cut -d= -f2)" ] \
  || fail "pkg-config reports another version"
# shellcheck disable=SC2046
c++ -std=c++17 -o "$work/pc-trainer" "$work/example/trainer.cc" $(pkg-config --cflags --libs cohort-dist) \
  || fail "building with pkg-config cohort-dist"

# Both run as a 2-process job under the installed launcher, its sidecars included.
export LD_LIBRARY_PATH="$prefix/lib"
for trainer in "$work/cmake-build/my-trainer" "$work/pc-trainer"; do
  out=$("$prefix/bin/cohort-run" -n 2 --initialization-timeout 60s -- "$trainer" 5 2>&1) || {
    echo "$out"; fail "$trainer failed under cohort-run"; }
  for rank in 0 1; do
    grep -q "rank $rank of 2 (restart attempt 0) heard from 2 processes and ran 5 steps (all-reduced total 5)" <<<"$out" \
      || { echo "$out"; fail "$trainer: rank $rank did not report"; }
  done
  grep -q "all 2 processes finished successfully" <<<"$out" || { echo "$out"; fail "job did not succeed"; }
done
echo "installed into $prefix; the example built with CMake and with pkg-config and ran as 2-process jobs"
