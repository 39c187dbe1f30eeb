#!/usr/bin/env bash
# Static checks of the Grafana dashboards in charts/cohort/dashboards/ (check_dashboards.py):
# datasources, variables, windows, and every query parsed with promql-parser (from PyPI) against
# docs/metrics.md and the recording rules.
# Usage: check_dashboards.sh SOURCE_DIR BUILD_DIR. Exit 77 (skipped) when PyPI is unreachable.
set -euo pipefail
src=${1:?usage: check_dashboards.sh SOURCE_DIR BUILD_DIR}
build=${2:?usage: check_dashboards.sh SOURCE_DIR BUILD_DIR}
venv="$build/monitoring-venv"
rc=0
bash "$src/tests/setup_python_venv.sh" "$venv" "promql_parser, yaml" promql-parser==0.12.0 pyyaml || rc=$?
[ $rc -eq 0 ] || exit $rc
"$venv/bin/python" "$src/tests/monitoring/check_dashboards.py" "$src"
