#!/usr/bin/env bash
# Makes (once) a Python virtual environment with packages from PyPI, for tests that need a real
# Python tool or client (jax for the JAX end-to-end test, kubernetes-validate for manifests).
# Usage: setup_python_venv.sh VENV_DIR MODULE PACKAGE...
#   MODULE: what `python -c "import MODULE"` must find afterwards.
#   PYTHON (environment): the interpreter that makes the environment; default python3.
# Exit 0: VENV_DIR/bin/python imports MODULE. 77: PyPI cannot be reached (the test skips and says
# so). Anything else: a real error (the test fails).
#
# Tests that share a VENV_DIR run concurrently under `ctest -j`: the setup holds an exclusive lock
# on VENV_DIR.lock, so one of them creates and fills the environment while the others wait and
# then find it ready (two `python3 -m venv` on one directory fail with "[Errno 17] File exists").
set -uo pipefail
venv=${1:?usage: setup_python_venv.sh VENV_DIR MODULE PACKAGE...}
module=${2:?usage: setup_python_venv.sh VENV_DIR MODULE PACKAGE...}
shift 2

mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
if ! flock --timeout 900 9; then
  echo "waited 15 minutes for another test to finish setting up $venv; giving up" >&2
  exit 1
fi

if "$venv/bin/python" -c "import $module" 2>/dev/null; then
  exit 0
fi
python=${PYTHON:-python3}
if ! "$python" -m venv "$venv"; then
  echo "cannot create a virtual environment at $venv with $(command -v "$python")" >&2
  exit 1
fi
if "$venv/bin/pip" install --quiet --disable-pip-version-check "$@"; then
  exec "$venv/bin/python" -c "import $module; print('$module ready in $venv')"
fi
if ! python3 -c "import urllib.request; urllib.request.urlopen('https://pypi.org/simple/pip/', timeout=20)" 2>/dev/null; then
  echo "PyPI (https://pypi.org) cannot be reached from this machine, so $* cannot be installed" >&2
  exit 77
fi
echo "pip could not install $* although PyPI is reachable (see pip's output above)" >&2
exit 1
