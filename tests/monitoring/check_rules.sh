#!/usr/bin/env bash
# Checks charts/cohort/rules/cohort-rules.yaml: `promtool check rules` with every lint fatal,
# `promtool test rules` on cohort-rules-test.yaml, and check_rules_complete.py (every alert has
# for/severity/summary/description/runbook_url, every runbook anchor is a heading of
# docs/observability.md, every alert is tested firing and not firing).
# promtool is Debian's `prometheus` package (scripts/install-deps.sh); PyYAML for the last check
# comes from PyPI into BUILD_DIR/monitoring-venv (the one check_dashboards.sh uses).
# Usage: check_rules.sh SOURCE_DIR BUILD_DIR. Exit 77 (skipped) when PyPI is unreachable; the
# promtool checks have run (and passed) by then.
set -euo pipefail
src=${1:?usage: check_rules.sh SOURCE_DIR BUILD_DIR}
build=${2:?usage: check_rules.sh SOURCE_DIR BUILD_DIR}
rules="$src/charts/cohort/rules/cohort-rules.yaml"
tests="$src/tests/monitoring/cohort-rules-test.yaml"
promtool check rules --lint=all --lint-fatal "$rules"
promtool test rules "$tests"

venv="$build/monitoring-venv"
rc=0
bash "$src/tests/setup_python_venv.sh" "$venv" "promql_parser, yaml" promql-parser==0.12.0 pyyaml || rc=$?
[ $rc -eq 0 ] || exit $rc
"$venv/bin/python" "$src/tests/monitoring/check_rules_complete.py" "$rules" "$tests" \
  "$src/docs/observability.md"
