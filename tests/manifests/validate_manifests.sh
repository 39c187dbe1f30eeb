#!/usr/bin/env bash
# Validates every Kubernetes manifest under manifests/ against the Kubernetes API schemas with
# kubernetes-validate (PyPI), strictly: unknown fields are errors. Custom resources (the example
# DistributedJob) have no published schema; the CRD's own schema tests cover them.
# Usage: validate_manifests.sh SOURCE_DIR BUILD_DIR. Exit 77 (skipped) when PyPI is unreachable.
set -uo pipefail
src=${1:?usage: validate_manifests.sh SOURCE_DIR BUILD_DIR}
build=${2:?usage: validate_manifests.sh SOURCE_DIR BUILD_DIR}
venv="$build/tools-venv"
bash "$src/tests/setup_python_venv.sh" "$venv" kubernetes_validate kubernetes-validate
rc=$?
[ $rc -eq 0 ] || exit $rc
mapfile -t files < <(find "$src/manifests" -name '*.yaml' | sort)
echo "validating ${#files[@]} manifests"
"$venv/bin/kubernetes-validate" --strict --no-warn "${files[@]}"
