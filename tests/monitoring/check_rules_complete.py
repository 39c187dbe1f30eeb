"""Checks what promtool does not about charts/cohort/rules/cohort-rules.yaml (run by check_rules.sh).

Usage: check_rules_complete.py RULES_FILE PROMTOOL_TEST_FILE OBSERVABILITY_MD

- Every alert has `for:` (0m written out), `labels.severity` critical, warning or info, and the
  annotations summary, description and runbook_url.
- An alert whose result carries `cohort_job` names the job in its summary
  (`{{ $labels.namespace }}/{{ $labels.cohort_job }}`); one whose result carries `rank` (an
  aggregation `by (..., rank)`) names `{{ $labels.rank }}`.
- Every runbook_url is docs/observability.md on GitHub with an anchor that is a heading there.
- The promtool test file loads this rules file and has, for every alert, a case where it fires
  (with severity and summary checked) and a case where it does not.
"""
import os
import re
import sys

import yaml

RUNBOOK = "https://github.com/cohort-dev/cohort/blob/main/docs/observability.md#"
SEVERITIES = {"critical", "warning", "info"}


def github_anchor(heading):
    """The id GitHub gives a Markdown heading: lower case, punctuation dropped, spaces to '-'."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(markdown):
    found, in_code = set(), False
    with open(markdown) as f:
        for line in f:
            if line.startswith("```"):
                in_code = not in_code
            m = re.match(r"#{1,6} (.+)", line)
            if m and not in_code:
                found.add(github_anchor(m.group(1)))
    return found


def main():
    rules_path, tests_path, doc_path = sys.argv[1:4]
    with open(rules_path) as f:
        groups = yaml.safe_load(f)["groups"]
    alerts = [r for g in groups for r in g["rules"] if "alert" in r]
    doc_anchors = anchors(doc_path)
    problems = []
    names = [a["alert"] for a in alerts]
    for n in sorted({n for n in names if names.count(n) > 1}):
        problems.append(f"alert {n} is defined {names.count(n)} times")

    for a in alerts:
        name, expr = a["alert"], a["expr"]
        ann = a.get("annotations", {})
        if "for" not in a:
            problems.append(f"{name}: needs `for:` (write 0m to fire at once)")
        if a.get("labels", {}).get("severity") not in SEVERITIES:
            problems.append(f"{name}: labels.severity must be one of {sorted(SEVERITIES)}")
        for key in ("summary", "description", "runbook_url"):
            if not ann.get(key):
                problems.append(f"{name}: needs annotations.{key}")
        summary = ann.get("summary", "")
        if "cohort_job" in expr and not ("{{ $labels.cohort_job }}" in summary
                                         and "{{ $labels.namespace }}" in summary):
            problems.append(f"{name}: its series carry cohort_job; the summary must name "
                            "{{ $labels.namespace }}/{{ $labels.cohort_job }}")
        if re.search(r"by \([^)]*\brank\b", expr) and "{{ $labels.rank }}" not in summary:
            problems.append(f"{name}: its series carry rank; the summary must name {{{{ $labels.rank }}}}")
        url = ann.get("runbook_url", "")
        if not url.startswith(RUNBOOK):
            problems.append(f"{name}: runbook_url must start with {RUNBOOK}")
        elif url[len(RUNBOOK):] not in doc_anchors:
            problems.append(f"{name}: runbook anchor #{url[len(RUNBOOK):]} is not a heading of "
                            f"{os.path.basename(doc_path)}")

    with open(tests_path) as f:
        tests = yaml.safe_load(f)
    rule_files = [os.path.normpath(os.path.join(os.path.dirname(tests_path), p))
                  for p in tests.get("rule_files", [])]
    if os.path.normpath(rules_path) not in rule_files:
        problems.append(f"{tests_path} does not load {rules_path}")
    fires, silent = set(), set()
    for t in tests.get("tests", []):
        for case in t.get("alert_rule_test", []):
            exp = case.get("exp_alerts") or []
            if not exp:
                silent.add(case["alertname"])
                continue
            fires.add(case["alertname"])
            for e in exp:
                if "severity" not in e.get("exp_labels", {}) or "summary" not in e.get("exp_annotations", {}):
                    problems.append(f"{case['alertname']} at {case['eval_time']}: a firing case must "
                                    "check exp_labels.severity and exp_annotations.summary")
    for name in names:
        if name not in fires:
            problems.append(f"{name}: no test case where it fires")
        if name not in silent:
            problems.append(f"{name}: no test case where it does not fire")
    for name in sorted((fires | silent) - set(names)):
        problems.append(f"the tests name {name}, which is not an alert")

    for p in problems:
        print("rules:", p)
    if problems:
        sys.exit(1)
    print(f"rules: {len(alerts)} alerts complete, each with a runbook section and tested firing and not firing")


main()
