"""Checks what charts/cohort renders (run by check_chart.sh with helm's output).

Usage: check_chart.py RBAC_MANIFEST OPERATOR_HELP DEFAULT_RENDER NAMESPACED_RENDER
                      MONITORING_RENDER CHART_DIR SCHEMA_DIR

- The chart's RBAC rules equal manifests/operator/rbac.yaml's (which tests/operator/runtime/
  rbac_test.cc checks against the operator's code), cluster-wide by default and as a Role in the
  watched namespace when operator.watchNamespace is set.
- Every flag the Deployment passes is one `cohort-operator --help` lists.
- Monitoring (off by default): with every monitoring value on (check_chart.sh's third render),
  the PodMonitor, ServiceMonitor and PrometheusRule are valid against the Prometheus Operator's
  CRD schemas in SCHEMA_DIR (closed: an unknown field fails, as strict field validation would);
  the PrometheusRule's spec equals rules/cohort-rules.yaml; every dashboards/*.json has a
  ConfigMap whose data parses and equals the file; the labels, annotations and namespace set in
  values appear; the PodMonitor maps job-name and restart-attempt, and never a target label
  `rank` (rank 0's per-rank series carry `rank` themselves).
"""
import glob
import json
import os
import re
import sys

import jsonschema
import yaml


def docs(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def find(objects, kind, name_suffix=""):
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"].endswith(name_suffix)]
    if len(found) != 1:
        sys.exit(f"expected one {kind} named *{name_suffix}, found {len(found)}")
    return found[0]


def crd_schema(path):
    """A CRD's openAPIV3Schema as a JSON schema that rejects unknown fields."""
    def close(node):
        if isinstance(node, dict):
            if "properties" in node and "additionalProperties" not in node:
                node["additionalProperties"] = False
            for v in node.values():
                close(v)
        elif isinstance(node, list):
            for v in node:
                close(v)
    with open(path) as f:
        schema = yaml.safe_load(f)["openAPIV3Schema"]
    close(schema)
    return schema


MONITORING_KINDS = ("PodMonitor", "ServiceMonitor", "PrometheusRule")


def check_monitoring(default, namespaced, monitoring, chart_dir, schema_dir, problems):
    for o in default:
        if o["kind"] in MONITORING_KINDS or o["kind"] == "ConfigMap":
            problems.append(f"the default render must not create the {o['kind']} {o['metadata']['name']}")
    schemas = {
        "PodMonitor": "monitoring.coreos.com_podmonitors.v1.yaml",
        "ServiceMonitor": "monitoring.coreos.com_servicemonitors.v1.yaml",
        "PrometheusRule": "monitoring.coreos.com_prometheusrules.v1.yaml",
    }
    for kind, file in schemas.items():
        validator = jsonschema.Draft7Validator(crd_schema(os.path.join(schema_dir, file)))
        obj = find(monitoring, kind)
        if obj["apiVersion"] != "monitoring.coreos.com/v1":
            problems.append(f"{kind}: apiVersion must be monitoring.coreos.com/v1")
        for e in validator.iter_errors(obj):
            path = ".".join(str(x) for x in e.absolute_path)
            problems.append(f"{kind} does not match its CRD schema at {path or '(top)'}: {e.message}")
        if obj["metadata"].get("labels", {}).get("release") != "kps":
            problems.append(f"{kind}: metrics.*.labels (release: kps) must be on it")

    with open(os.path.join(chart_dir, "rules", "cohort-rules.yaml")) as f:
        rules = yaml.safe_load(f)
    if find(monitoring, "PrometheusRule")["spec"] != rules:
        problems.append("the PrometheusRule's spec differs from rules/cohort-rules.yaml")

    pm = find(monitoring, "PodMonitor")
    endpoint = pm["spec"]["podMetricsEndpoints"][0]
    relabel = {tuple(r.get("sourceLabels", [])): r.get("targetLabel") for r in endpoint.get("relabelings", [])}
    for r in endpoint.get("relabelings", []) + endpoint.get("metricRelabelings", []):
        if r.get("targetLabel") == "rank" or r.get("action", "").lower() == "labelmap":
            problems.append(f"PodMonitor: relabeling {r} would set or clash with `rank`")
    if relabel.get(("__meta_kubernetes_pod_label_cohort_dev_job_name",)) != "cohort_job":
        problems.append("PodMonitor: must map the pod label cohort.dev/job-name to cohort_job")
    if relabel.get(("__meta_kubernetes_pod_label_cohort_dev_restart_attempt",)) != "restart_attempt":
        problems.append("PodMonitor: must map the pod label cohort.dev/restart-attempt to restart_attempt")
    if endpoint.get("port") != "metrics" or endpoint.get("interval") != "15s":
        problems.append("PodMonitor: must scrape port `metrics` at metrics.podMonitor.interval (15s)")
    if pm["spec"]["selector"] != {"matchLabels": {"app.kubernetes.io/managed-by": "cohort-operator"}}:
        problems.append("PodMonitor: must select the pods labelled app.kubernetes.io/managed-by=cohort-operator")
    if pm["spec"].get("namespaceSelector") != {"any": True}:
        problems.append("PodMonitor: must watch every namespace when operator.watchNamespace is empty")
    if find(namespaced, "PodMonitor")["spec"].get("namespaceSelector") != {"matchNames": ["ml"]}:
        problems.append("PodMonitor: with operator.watchNamespace=ml it must watch namespace ml only")

    configmaps = {o["metadata"]["name"]: o for o in monitoring if o["kind"] == "ConfigMap"}
    dashboards = sorted(glob.glob(os.path.join(chart_dir, "dashboards", "*.json")))
    if len(configmaps) != len(dashboards):
        problems.append(f"{len(dashboards)} dashboards but {len(configmaps)} ConfigMaps")
    for path in dashboards:
        key = os.path.basename(path)
        found = [o for o in configmaps.values() if key in o.get("data", {})]
        if len(found) != 1:
            problems.append(f"expected one ConfigMap holding {key}, found {len(found)}")
            continue
        cm = found[0]
        meta = cm["metadata"]
        with open(path) as f:
            want = json.load(f)
        try:
            if json.loads(cm["data"][key]) != want:
                problems.append(f"ConfigMap {meta['name']}: {key} differs from dashboards/{key}")
        except json.JSONDecodeError as e:
            problems.append(f"ConfigMap {meta['name']}: {key} is not JSON: {e}")
        labels, annotations = meta.get("labels", {}), meta.get("annotations", {})
        if labels.get("grafana_dashboard") != "1" or labels.get("team") != "ml":
            problems.append(f"ConfigMap {meta['name']}: needs labels grafana_dashboard: \"1\" and team: ml")
        if annotations != {"grafana_folder": "Cohort", "owner": "ml-platform"}:
            problems.append(f"ConfigMap {meta['name']}: annotations {annotations} must be the folder's and owner's")
        if meta.get("namespace") != "monitoring":
            problems.append(f"ConfigMap {meta['name']}: grafana.dashboards.namespace must set its namespace")


def main():
    rbac_path, help_path, default_path, namespaced_path, monitoring_path, chart_dir, schema_dir = sys.argv[1:8]
    monitoring = docs(monitoring_path)
    manifest = docs(rbac_path)
    default = docs(default_path)
    namespaced = docs(namespaced_path)
    problems = []

    want_rules = find(manifest, "ClusterRole")["rules"]
    want_lease = find(manifest, "Role", "leader-election")["rules"]
    if find(default, "ClusterRole")["rules"] != want_rules:
        problems.append("the chart's ClusterRole rules differ from manifests/operator/rbac.yaml")
    if find(default, "Role", "leader-election")["rules"] != want_lease:
        problems.append("the chart's leader-election Role differs from manifests/operator/rbac.yaml")
    role = find(namespaced, "Role", "operator")
    if role["metadata"].get("namespace") != "ml" or role["rules"] != want_rules:
        problems.append("with operator.watchNamespace=ml the rules must be a Role in namespace ml")
    if any(o["kind"] in ("ClusterRole", "ClusterRoleBinding") for o in namespaced):
        problems.append("with operator.watchNamespace set the chart must not grant cluster-wide rights")

    with open(help_path) as f:
        known = set(re.findall(r"--[a-z][a-z0-9-]*", f.read()))
    for render, name in ((default, "default"), (namespaced, "namespaced")):
        deployment = find(render, "Deployment")
        args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        for arg in args:
            flag = arg.split("=", 1)[0]
            if flag not in known:
                problems.append(f"{name} render passes {flag}, which cohort-operator --help does not list")
    if "--namespace=ml" not in find(namespaced, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]:
        problems.append("operator.watchNamespace=ml must pass --namespace=ml")
    check_monitoring(default, namespaced, monitoring, chart_dir, schema_dir, problems)

    for p in problems:
        print("chart:", p)
    if problems:
        sys.exit(1)
    print(f"chart: RBAC equals manifests/operator/rbac.yaml; {len(args)} operator flags all known; "
          "PodMonitor, ServiceMonitor and PrometheusRule match their CRD schemas; rules and dashboards "
          "equal the chart's files")


main()
