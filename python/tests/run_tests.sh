#!/usr/bin/env bash
# ctest's `python_package` (label python): builds the cohort wheel (scripts/build-python-wheel.sh),
# installs it into a virtual environment of its own (build/python/cohort-test: numpy, ml_dtypes,
# pytest from PyPI, pinned), lets that environment import the tests' torch (build/python/
# torch-2.15.0, shared with the framework tests), and runs python/tests with pytest.
# Usage: run_tests.sh SOURCE_DIR BUILD_DIR. Exit 77 (skipped) when PyPI cannot be reached.
set -uo pipefail
src=${1:?usage: run_tests.sh SOURCE_DIR BUILD_DIR}
build=${2:?usage: run_tests.sh SOURCE_DIR BUILD_DIR}
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
wheel=$(bash "$src/scripts/build-python-wheel.sh" "$build" | sed -n 's/^cohort wheel: \(.*\.whl\)$/\1/p')
[[ -f "$wheel" ]] || { echo "no wheel was built" >&2; exit 1; }
"$venv/bin/pip" install --quiet --disable-pip-version-check --force-reinstall --no-deps "$wheel" ||
  exit 1
flock --unlock 8

site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
torch_site=$("$torch_venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$torch_site" >"$site/cohort-test-torch.pth"  # after the environment's own numpy

cd "$build" || exit 1  # not the source tree: `import cohort` must find the installed wheel
COHORT_BIN_DIR="$build/bin" COHORT_TEST_REQUIRE_TORCH=1 \
  "$venv/bin/python" -m pytest -q -p no:cacheprovider "$src/python/tests"
rc=$?
# pytest's 5 is "no tests collected": a broken suite, not a pass.
[[ $rc -eq 5 ]] && { echo "pytest collected no tests" >&2; exit 1; }
exit $rc
