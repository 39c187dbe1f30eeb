#!/usr/bin/env bash
# Makes (once) a virtual environment with jax for CPU from PyPI, for the end-to-end test that
# runs an unmodified JAX program as a DistributedJob.
# Usage: setup_jax_venv.sh VENV_DIR
# Exit 0: VENV_DIR/bin/python imports jax. 77: PyPI cannot be reached (the test skips and says
# so). Anything else: a real error (the test fails).
set -uo pipefail
venv=${1:?usage: setup_jax_venv.sh VENV_DIR}

if "$venv/bin/python" -c "import jax" 2>/dev/null; then
  exit 0
fi
if ! python3 -m venv "$venv"; then
  echo "cannot create a virtual environment at $venv with $(command -v python3)" >&2
  exit 1
fi
if "$venv/bin/pip" install --quiet --disable-pip-version-check jax; then
  exec "$venv/bin/python" -c "import jax; print('jax', jax.__version__, 'in', '$venv')"
fi
if ! python3 -c "import urllib.request; urllib.request.urlopen('https://pypi.org/simple/jax/', timeout=20)" 2>/dev/null; then
  echo "PyPI (https://pypi.org) cannot be reached from this machine, so jax cannot be installed" >&2
  exit 77
fi
echo "pip could not install jax although PyPI is reachable (see pip's output above)" >&2
exit 1
