"""Checks what charts/cohort renders (run by check_chart.sh with helm's output).

Usage: check_chart.py RBAC_MANIFEST OPERATOR_HELP DEFAULT_RENDER NAMESPACED_RENDER

- The chart's RBAC rules equal manifests/operator/rbac.yaml's (which tests/operator/runtime/
  rbac_test.cc checks against the operator's code), cluster-wide by default and as a Role in the
  watched namespace when operator.watchNamespace is set.
- Every flag the Deployment passes is one `cohort-operator --help` lists.
"""
import re
import sys

import yaml


def docs(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def find(objects, kind, name_suffix=""):
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"].endswith(name_suffix)]
    if len(found) != 1:
        sys.exit(f"expected one {kind} named *{name_suffix}, found {len(found)}")
    return found[0]


def main():
    rbac_path, help_path, default_path, namespaced_path = sys.argv[1:5]
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

    for p in problems:
        print("chart:", p)
    if problems:
        sys.exit(1)
    print(f"chart: RBAC equals manifests/operator/rbac.yaml; {len(args)} operator flags all known")


main()
