#!/usr/bin/env bash
# `make python`: the cohort wheel, built against this build's libdist, into BUILD_DIR/python-dist/.
#
#   scripts/build-python-wheel.sh [BUILD_DIR]      (default: build)
#   PYTHON=python3.13 scripts/build-python-wheel.sh  (the interpreter to build for; default python3)
#
# libdist (headers, libcohort_dist.so, its CMake package) is installed into
# BUILD_DIR/python/cohort-prefix, then scikit-build-core and nanobind (pinned, from PyPI, in the
# build environment BUILD_DIR/python/build-venv) compile the bindings against it; the wheel
# carries libcohort_dist.so.0 next to the module. Prints the wheel's path last.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
build="$(cd "${1:-$repo/build}" && pwd)"
python=${PYTHON:-python3}
pyver=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])') || {
  echo "build-python-wheel: cannot run $python" >&2
  exit 2
}
venv="$build/python/build-venv-$pyver"
prefix="$build/python/cohort-prefix"
dist="$build/python-dist"

[[ -f "$build/lib/libcohort_dist.so" ]] || {
  echo "build-python-wheel: build first (make build): $build/lib/libcohort_dist.so is missing" >&2
  exit 2
}
echo "cohort wheel: build environment $venv (scikit-build-core, nanobind)"
PYTHON="$python" bash "$repo/tests/setup_python_venv.sh" "$venv" "scikit_build_core, nanobind" \
  "scikit-build-core==1.1.2" "nanobind==3.1.0" "wheel" >/dev/null
echo "cohort wheel: libdist installed into $prefix"
cmake --install "$build" --prefix "$prefix" --strip >/dev/null
mkdir -p "$dist"
tag=$("$python" -c 'import sys; v = sys.version_info[:2]; print("cp312-abi3" if v >= (3, 12) else "cp%d%d-cp%d%d" % (v + v))')
rm -f "$dist"/cohort-*-"$tag"-*.whl
echo "cohort wheel: compiling the bindings"
COHORT_PREFIX="$prefix" "$venv/bin/pip" wheel --quiet --disable-pip-version-check \
  --no-build-isolation --no-deps -w "$dist" \
  --config-settings=build-dir="$build/python/wheel-build-$pyver" "$repo/python"
wheel=$(ls "$dist"/cohort-*-"$tag"-*.whl)
echo "cohort wheel: $wheel"
