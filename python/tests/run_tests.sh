#!/usr/bin/env bash
# ctest's `python_package` (label python): builds the cohort wheel (scripts/build-python-wheel.sh),
# installs it into a virtual environment of its own (build/python/cohort-test: numpy, ml_dtypes,
# pytest from PyPI, pinned), lets that environment import the tests' torch (build/python/
# torch-2.15.0, shared with the framework tests), and runs python/tests with pytest. Where the
# machine has a Python 3.10, the package's own suite (test_package.py, without torch) runs again
# on the oldest versions pyproject.toml allows (build/python/cohort-oldest: Python 3.10, numpy
# 1.24, ml_dtypes 0.3, pytest 7).
# Usage: run_tests.sh SOURCE_DIR BUILD_DIR [--environment-only]. Exit 77 (skipped) when PyPI cannot
# be reached. --environment-only makes the environments (build/python/cohort-test with the wheel
# and torch; build/python/cohort-jax-<version> with the wheel and that jax, and for 0.10.2 also
# jax[k8s]'s kubernetes package) and stops: the operator's end-to-end tests run the examples with
# them.
set -uo pipefail
src=${1:?usage: run_tests.sh SOURCE_DIR BUILD_DIR}
build=${2:?usage: run_tests.sh SOURCE_DIR BUILD_DIR}
environment_only=${3:-}
venv="$build/python/cohort-test"
torch_venv="$build/python/torch-2.15.0"

bash "$src/tests/setup_python_venv.sh" "$venv" "numpy, ml_dtypes, pytest" \
  "numpy==2.4.6" "ml_dtypes==0.6.0" "pytest==9.2.0"
rc=$?
[[ $rc -eq 0 ]] || exit $rc
bash "$src/tests/setup_python_venv.sh" "$torch_venv" "torch.distributed" \
  "torch==2.15.0" "numpy==2.4.6"
rc=$?
[[ $rc -eq 0 ]] || exit $rc

# One wheel build at a time (the build environment and the wheel directory are shared).
exec 8>"$build/python/wheel.lock"
flock --timeout 900 8 || { echo "waited 15 minutes for another wheel build" >&2; exit 1; }
wheel_for() {  # wheel_for PYTHON: builds the wheel for that interpreter, prints its path
  local log
  log=$(PYTHON="$1" bash "$src/scripts/build-python-wheel.sh" "$build") || return $?  # 77: no PyPI
  sed -n 's/^cohort wheel: \(.*\.whl\)$/\1/p' <<<"$log"
}
site_of() { "$1" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }
# A venv of `base` with the cohort wheel, seeing another venv's packages (after its own).
venv_with_cohort() {  # venv_with_cohort DIR BASE_PYTHON OTHER_VENV WHEEL
  local version='import sys; print(sys.version_info[:2])'
  if [[ -x "$1/bin/python" && "$("$1/bin/python" -c "$version")" != "$("$2" -c "$version")" ]]; then
    rm -rf "$1"  # made for another interpreter (the other venv was remade since)
  fi
  [[ -x "$1/bin/python" ]] || "$2" -m venv "$1" || return 1
  "$1/bin/pip" install --quiet --disable-pip-version-check --force-reinstall --no-deps "$4" ||
    return 1
  site_of "$3/bin/python" >"$(site_of "$1/bin/python")/cohort-test-shared.pth"
}
wheel=$(wheel_for python3) || exit $?
[[ -f "$wheel" ]] || { echo "no wheel was built" >&2; exit 1; }
"$venv/bin/pip" install --quiet --disable-pip-version-check --force-reinstall --no-deps "$wheel" ||
  exit 1
# torch, from the framework tests' environment (a few GB: installed once per machine).
version='import sys; print(sys.version_info[:2])'
if [[ "$("$venv/bin/python" -c "$version")" != "$("$torch_venv/bin/python" -c "$version")" ]]; then
  echo "$torch_venv was made with another Python than $venv: remove one of them" >&2
  exit 1
fi
site_of "$torch_venv/bin/python" >"$(site_of "$venv/bin/python")/cohort-test-torch.pth"

# Each jax the tests support, in its own environment (jax 0.12 needs Python >= 3.12).
python312=""
for p in python3.13 python3.12 $(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.1[2-9]* 2>/dev/null |
                                 sort -rV | sed 's|$|/bin/python3|'); do
  # (a pyenv shim may exist and still refuse to run: try it)
  if "$p" -c 'import sys; assert sys.version_info >= (3, 12)' >/dev/null 2>&1; then
    python312=$(command -v "$p")
    break
  fi
done
jax_pythons=""
for version in 0.9.2 0.10.2 0.12.0.1; do
  base=python3
  if [[ $version == 0.12.* ]]; then
    if [[ -z "$python312" ]]; then
      export "COHORT_JAX_SKIP_$version=jax $version needs Python >= 3.12 and this machine has none"
      jax_pythons+="$version=,"
      continue
    fi
    base=$python312
  fi
  jax_venv="$build/python/jax-$version"
  PYTHON="$base" bash "$src/tests/setup_python_venv.sh" "$jax_venv" jax "jax==$version" \
    "jaxlib==$version" || exit $?
  # The jax environment may have been made (by the framework tests) with another interpreter
  # of the same need: build for the one it has.
  jpython="$jax_venv/bin/python"
  jwheel=$(wheel_for "$jpython") || exit $?
  [[ -f "$jwheel" ]] || { echo "no wheel was built for $jpython" >&2; exit 1; }
  venv_with_cohort "$build/python/cohort-jax-$version" "$jpython" "$jax_venv" "$jwheel" || exit 1
  jax_pythons+="$version=$build/python/cohort-jax-$version/bin/python,"
  if [[ $version == 0.10.2 ]]; then  # with jax[k8s]'s package: JAX's own Kubernetes detector
    k8s_python="$build/python/cohort-jax-$version/bin/python"
    "$k8s_python" -c 'import kubernetes' 2>/dev/null ||
      "$k8s_python" -m pip install --quiet --disable-pip-version-check "kubernetes==37.0.2" ||
      exit 1
    export COHORT_JAX_K8S_PYTHON="$version=$k8s_python"
  fi
done

# The oldest versions pyproject.toml allows, where this machine has a Python 3.10.
oldest="$build/python/cohort-oldest"
python310=""
for p in python3.10 $(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.10* 2>/dev/null |
                      sort -rV | sed 's|$|/bin/python3|'); do
  if "$p" -c 'import sys; assert sys.version_info[:2] == (3, 10)' >/dev/null 2>&1; then
    python310=$(command -v "$p")
    break
  fi
done
if [[ -n "$python310" && "$environment_only" != --environment-only ]]; then
  PYTHON="$python310" bash "$src/tests/setup_python_venv.sh" "$oldest" "numpy, ml_dtypes, pytest" \
    "numpy==1.24.4" "ml_dtypes==0.3.2" "pytest==7.4.4" || exit $?
  owheel=$(wheel_for "$oldest/bin/python") || exit $?
  [[ -f "$owheel" ]] || { echo "no wheel was built for $oldest/bin/python" >&2; exit 1; }
  "$oldest/bin/pip" install --quiet --disable-pip-version-check --force-reinstall --no-deps \
    "$owheel" || exit 1
fi
flock --unlock 8
[[ "$environment_only" == --environment-only ]] && exit 0
export COHORT_JAX_PYTHONS="$jax_pythons"

cd "$build" || exit 1  # not the source tree: `import cohort` must find the installed wheel
COHORT_BIN_DIR="$build/bin" COHORT_TEST_REQUIRE_TORCH=1 \
  "$venv/bin/python" -m pytest -q -p no:cacheprovider "$src/python/tests"
rc=$?
# pytest's 5 is "no tests collected": a broken suite, not a pass.
[[ $rc -eq 5 ]] && { echo "pytest collected no tests" >&2; exit 1; }
[[ $rc -eq 0 ]] || exit $rc
if [[ -z "$python310" ]]; then
  echo "no Python 3.10 on this machine: the oldest supported versions were not tested"
  exit 0
fi
echo "again on the oldest supported versions: $("$oldest/bin/python" -c \
  'import sys, numpy, ml_dtypes; print("Python", sys.version.split()[0], "numpy", numpy.__version__, "ml_dtypes", ml_dtypes.__version__)')"
COHORT_BIN_DIR="$build/bin" "$oldest/bin/python" -m pytest -q -p no:cacheprovider \
  "$src/python/tests/test_package.py"
rc=$?
[[ $rc -eq 5 ]] && { echo "pytest collected no tests" >&2; exit 1; }
exit $rc
