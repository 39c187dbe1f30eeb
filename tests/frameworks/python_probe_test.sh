#!/usr/bin/env bash
# Runs tests/frameworks/python_probe_test.py: the Python start-up hook of launcher/python_probe
# with plain python3, with torch 2.15.0 (a 2-rank gloo DDP) and with JAX 0.10.2, the last two in
# the virtual environments the other framework tests use (made here if PyPI can be reached).
# Usage: python_probe_test.sh SOURCE_DIR BUILD_DIR
# Exit 0: passed; 1: failed; 77: the plain parts passed, torch's or JAX's was skipped (no PyPI).
set -uo pipefail
source_dir=${1:?usage: python_probe_test.sh SOURCE_DIR BUILD_DIR}
build_dir=${2:?usage: python_probe_test.sh SOURCE_DIR BUILD_DIR}

environment() {  # VENV MODULE PACKAGE...: prints VENV/bin/python, or nothing when PyPI is out of reach
  local venv=$1
  shift
  bash "$source_dir/tests/setup_python_venv.sh" "$venv" "$@" >&2
  case $? in
    0) echo "$venv/bin/python" ;;
    77) ;;
    *) echo "setting up $venv failed" >&2; return 1 ;;
  esac
}

torch_python=$(environment "$build_dir/python/torch-2.15.0" torch.distributed torch==2.15.0 numpy==2.4.6) || exit 1
jax_python=$(environment "$build_dir/python/jax-0.10.2" jax jax==0.10.2 jaxlib==0.10.2) || exit 1
exec python3 "$source_dir/tests/frameworks/python_probe_test.py" --source-dir "$source_dir" \
  --torch-python "$torch_python" --jax-python "$jax_python"
