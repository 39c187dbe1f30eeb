"""Static checks of the Grafana dashboards in charts/cohort/dashboards/ (there is no Grafana and
no dashboard-linter here; this replaces what they would check).

Usage: check_dashboards.py SOURCE_DIR   (run by check_dashboards.sh in a venv with promql-parser)

For every dashboard:
- valid JSON, schemaVersion >= 39, `id` null, a `uid` unique across the dashboards;
- panels of the modern types only, unique ids (rows included), inside the 24-column grid and not
  overlapping;
- every panel and every target on the `${datasource}` variable: {"type": "prometheus",
  "uid": "${datasource}"};
- the `datasource` variable (type datasource, query prometheus), every `$variable` an expression
  uses defined, and the job dashboard's `namespace` and `job` variables as documented;
- windows: in a dashboard every range (`[...]`) is `$__rate_interval` (Grafana sizes it to the
  scrape interval and the zoom) or `$__range` (a stat that totals the selected time range).
  Fixed windows such as `[5m]` belong in recording rules (charts/cohort/rules/cohort-rules.yaml),
  which the dashboards then read;
- every expression, variables substituted, parses (promql-parser), and every metric it selects is
  documented in docs/metrics.md (a name in backticks in the first cell of a table row; a
  histogram's _bucket, _sum and _count too) or is a recording rule of the rules file;
- a legend's `{{label}}` is a label the expression keeps, where its labels can be known
  (e.g. `sum by (pod)` keeps only `pod`).
"""
import glob
import json
import os
import re
import sys

import promql_parser
import yaml

PANEL_TYPES = {"row", "stat", "timeseries", "state-timeline", "table", "bargauge"}
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
WINDOWS = {"$__rate_interval", "$__range"}
# Values substituted for Grafana's variables before parsing.
BUILTINS = {"__rate_interval": "5m", "__range": "1h", "__interval": "1m"}
REQUIRED_VARIABLES = {
    "cohort-job": {
        "namespace": "label_values(cohort_rank, namespace)",
        "job": 'label_values(cohort_rank{namespace="$namespace"}, cohort_job)',
    },
}
ANY = None  # an expression whose output labels cannot be known statically


def documented_metrics(metrics_md):
    names = set()
    with open(metrics_md) as f:
        for line in f:
            if not line.startswith("|"):
                continue
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            m = re.fullmatch(r"`([a-zA-Z_:][a-zA-Z0-9_:]*)`", cells[0])
            if not m:
                continue
            names.add(m.group(1))
            if len(cells) > 1 and cells[1] == "histogram":
                names.update(m.group(1) + s for s in ("_bucket", "_sum", "_count"))
    return names


def recording_rules(rules_file):
    with open(rules_file) as f:
        doc = yaml.safe_load(f)
    return {r["record"] for g in doc["groups"] for r in g["rules"] if "record" in r}


def strip_strings(expr):
    return re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)


def substitute(expr, variables):
    def sub(m):
        name = m.group(1) or m.group(2)
        if name in BUILTINS:
            return BUILTINS[name]
        if name in variables:
            return "x"
        raise ValueError(f"uses ${name}, which is not a variable of the dashboard")
    return re.sub(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)", sub, expr)


def selected_metrics(node):
    names = []

    def visit(n):
        if isinstance(n, promql_parser.VectorSelector):
            if n.name:
                names.append(n.name)
            else:
                names.extend(m.value for m in n.matchers.matchers if m.name == "__name__")
    promql_parser.walk(node, visit)
    return names


def output_labels(n):
    """The labels an expression's result keeps, or ANY when they cannot be known statically."""
    P = promql_parser
    if isinstance(n, (P.VectorSelector, P.MatrixSelector)):
        return ANY
    if isinstance(n, (P.NumberLiteral, P.StringLiteral)):
        return set()
    if isinstance(n, (P.ParenExpr, P.UnaryExpr, P.SubqueryExpr)):
        return output_labels(n.expr)
    if isinstance(n, P.AggregateExpr):
        op = str(n.op)
        if op in ("topk", "bottomk", "limitk", "limit_ratio"):
            return output_labels(n.expr)
        if n.modifier is None:
            inner = set()
        elif n.modifier.type == P.AggModifierType.By:
            inner = set(n.modifier.labels)
        else:
            inner = output_labels(n.expr)
            inner = ANY if inner is ANY else inner - set(n.modifier.labels)
        if op == "count_values" and inner is not ANY:
            inner.add(str(n.param.val) if hasattr(n.param, "val") else "")
        return inner
    if isinstance(n, P.Call):
        func = n.func.name
        if func in ("vector", "time", "scalar", "pi"):
            return set()
        if func == "histogram_quantile":
            inner = output_labels(n.args[1])
            return ANY if inner is ANY else inner - {"le"}
        if func in ("label_replace", "label_join"):
            inner = output_labels(n.args[0])
            return ANY if inner is ANY else inner | {n.args[1].val}
        if func.startswith("absent"):
            return ANY
        return output_labels(n.args[0]) if n.args else set()
    if isinstance(n, P.BinaryExpr):
        op = str(n.op)
        lhs, rhs = output_labels(n.lhs), output_labels(n.rhs)
        if op in ("and", "unless"):
            return lhs
        if op == "or":
            return ANY if lhs is ANY or rhs is ANY else lhs | rhs
        if isinstance(n.lhs, P.NumberLiteral):
            return rhs
        if isinstance(n.rhs, P.NumberLiteral):
            return lhs
        mod = n.modifier
        card = mod.card if mod is not None else None
        extra = set(mod.group_labels or []) if mod is not None else set()
        if card == P.VectorMatchCardinality.ManyToOne:
            return ANY if lhs is ANY else lhs | extra
        if card == P.VectorMatchCardinality.OneToMany:
            return ANY if rhs is ANY else rhs | extra
        if mod is not None and mod.matching is not None:
            return ANY  # one-to-one with on()/ignoring(): leave it to Prometheus
        return lhs
    return ANY


def check_dashboard(path, documented, records, problems):
    name = os.path.basename(path)

    def problem(msg):
        problems.append(f"{name}: {msg}")

    try:
        with open(path) as f:
            dash = json.load(f)
    except json.JSONDecodeError as e:
        problem(f"is not valid JSON: {e}")
        return None
    if dash.get("schemaVersion", 0) < 39:
        problem(f"schemaVersion {dash.get('schemaVersion')} < 39")
    if dash.get("id") is not None:
        problem("`id` must be null (Grafana assigns it on import)")
    uid = dash.get("uid")
    if not uid or len(uid) > 40:
        problem("needs a `uid` of 1 to 40 characters")

    variables = {v["name"]: v for v in dash.get("templating", {}).get("list", [])}
    ds = variables.get("datasource")
    if not ds or ds.get("type") != "datasource" or ds.get("query") != "prometheus":
        problem("needs a `datasource` variable of type datasource with query prometheus")

    def var_query(v):
        q = v.get("query")
        return q.get("query") if isinstance(q, dict) else q

    for var, want in REQUIRED_VARIABLES.get(uid, {}).items():
        if var not in variables:
            problem(f"needs the variable `{var}`")
        elif var_query(variables[var]) != want:
            problem(f"variable `{var}` must be `{want}`, is `{var_query(variables[var])}`")
    exprs = []  # (where, expr, legend)
    for var in variables.values():
        if var.get("type") != "query":
            continue
        if var.get("datasource") != DATASOURCE:
            problem(f"variable `{var['name']}` must use {DATASOURCE}")
        q = var_query(var) or ""
        m = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", q.strip())
        if not m:
            problem(f"variable `{var['name']}`: expected label_values(SELECTOR, LABEL), got `{q}`")
            continue
        exprs.append((f"variable `{var['name']}`", m.group(1), None))

    panels = []
    for p in dash.get("panels", []):
        panels.append(p)
        panels.extend(p.get("panels", []))  # a collapsed row holds its panels
    ids = [p.get("id") for p in panels]
    for i in sorted({i for i in ids if ids.count(i) > 1}, key=str):
        problem(f"panel id {i} is used {ids.count(i)} times")
    cells = {}
    for p in panels:
        where = f"panel {p.get('id')} \"{p.get('title')}\""
        if p.get("type") not in PANEL_TYPES:
            problem(f"{where}: type {p.get('type')} is not one of {sorted(PANEL_TYPES)}")
        if not p.get("title"):
            problem(f"{where}: needs a title")
        if p.get("datasource") != DATASOURCE:
            problem(f"{where}: datasource must be {DATASOURCE}, is {p.get('datasource')}")
        g = p.get("gridPos", {})
        if not all(isinstance(g.get(k), int) for k in "xywh") or g["x"] < 0 or g["x"] + g["w"] > 24:
            problem(f"{where}: gridPos {g} is not inside the 24-column grid")
        else:
            for x in range(g["x"], g["x"] + g["w"]):
                for y in range(g["y"], g["y"] + g["h"]):
                    if (x, y) in cells and p.get("type") != "row":
                        problem(f"{where}: overlaps panel {cells[(x, y)]}")
                        break
                    cells[(x, y)] = p.get("id")
                else:
                    continue
                break
        if p.get("type") == "row":
            continue
        targets = p.get("targets", [])
        if not targets:
            problem(f"{where}: has no query")
        refs = [t.get("refId") for t in targets]
        if len(set(refs)) != len(refs):
            problem(f"{where}: refIds {refs} are not unique")
        for t in targets:
            if t.get("datasource") != DATASOURCE:
                problem(f"{where} target {t.get('refId')}: datasource must be {DATASOURCE}")
            if not t.get("expr"):
                problem(f"{where} target {t.get('refId')}: has no expr")
                continue
            exprs.append((f"{where} target {t.get('refId')}", t["expr"], t.get("legendFormat")))

    for where, expr, legend in exprs:
        for window in re.findall(r"\[([^\]]*)\]", strip_strings(expr)):
            if window not in WINDOWS:
                problem(f"{where}: window [{window}] must be [$__rate_interval] or [$__range] "
                        f"(a fixed window belongs in a recording rule): {expr}")
        try:
            ast = promql_parser.parse(substitute(expr, variables))
        except ValueError as e:
            problem(f"{where}: does not parse ({e}): {expr}")
            continue
        for metric in selected_metrics(ast):
            if metric not in documented and metric not in records:
                problem(f"{where}: metric {metric} is neither documented in docs/metrics.md nor a "
                        "recording rule")
        if legend and legend != "__auto":
            keeps = output_labels(ast)
            for label in re.findall(r"\{\{\s*(\w+)\s*\}\}", legend):
                if keeps is not ANY and label not in keeps:
                    problem(f"{where}: legend uses {{{{{label}}}}}, but the expression keeps only "
                            f"{sorted(keeps)}: {expr}")
    return dash


def main():
    src = sys.argv[1]
    documented = documented_metrics(os.path.join(src, "docs", "metrics.md"))
    records = recording_rules(os.path.join(src, "charts", "cohort", "rules", "cohort-rules.yaml"))
    paths = sorted(glob.glob(os.path.join(src, "charts", "cohort", "dashboards", "*.json")))
    if not paths:
        sys.exit("no dashboards in charts/cohort/dashboards/")
    problems = []
    uids = {}
    npanels = nexprs = 0
    for path in paths:
        dash = check_dashboard(path, documented, records, problems)
        if dash is None:
            continue
        uid = dash.get("uid")
        if uid in uids:
            problems.append(f"{os.path.basename(path)}: uid {uid} is also {uids[uid]}'s")
        uids[uid] = os.path.basename(path)
        for p in dash.get("panels", []):
            npanels += 1
            nexprs += len(p.get("targets", []))
    for p in problems:
        print("dashboards:", p)
    if problems:
        sys.exit(1)
    print(f"dashboards: {len(paths)} dashboards, {npanels} panels, {nexprs} queries: all on "
          "${datasource}, parse, and use documented metrics or recording rules")


main()
