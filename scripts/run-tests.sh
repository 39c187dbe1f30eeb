#!/usr/bin/env bash
# `make test` after the build: every test with ctest, then what a CI log should show every time so
# that a regression in the suite's cost is seen where it happens: how long `make test` took (the
# packages and the build, then the tests), and the ten slowest tests (docs/testing.md, "Where the
# time goes").
#
# Usage: run-tests.sh BUILD_DIR JOBS START_EPOCH BUILT_EPOCH [CTEST_ARGS...]
#   START_EPOCH: when `make test` started (date +%s); BUILT_EPOCH: when its build ended.
# Exits with ctest's status.
set -uo pipefail
build=${1:?usage: run-tests.sh BUILD_DIR JOBS START_EPOCH BUILT_EPOCH [CTEST_ARGS...]}
jobs=${2:?usage: run-tests.sh BUILD_DIR JOBS START_EPOCH BUILT_EPOCH [CTEST_ARGS...]}
started=${3:?usage: run-tests.sh BUILD_DIR JOBS START_EPOCH BUILT_EPOCH [CTEST_ARGS...]}
built=${4:?usage: run-tests.sh BUILD_DIR JOBS START_EPOCH BUILT_EPOCH [CTEST_ARGS...]}
shift 4

build=$(cd "$build" && pwd)
junit="$build/Testing/ctest-junit.xml"
mkdir -p "$build/Testing"
rm -f "$junit"
rc=0
(cd "$build" && ctest --output-on-failure -j "$jobs" --timeout 600 --output-junit "$junit" "$@") || rc=$?
ended=$(date +%s)

python3 - "$junit" "$started" "$built" "$ended" <<'PY'
import sys
import xml.etree.ElementTree as ET

junit, started, built, ended = sys.argv[1], *map(int, sys.argv[2:])
def minutes(s):
    return f"{s // 60}m{s % 60:02d}s"
print()
print(f"make test took {minutes(ended - started)}: packages and build {minutes(built - started)}, "
      f"tests {minutes(ended - built)}")
try:
    root = ET.parse(junit).getroot()
except (OSError, ET.ParseError) as e:
    print(f"(no per-test times: {junit}: {e})")
    sys.exit(0)
cases = []
for case in root.iter("testcase"):
    state = case.get("status", "run")
    if case.find("failure") is not None:
        state = "failed"
    elif case.find("skipped") is not None or state in ("notrun", "disabled"):
        state = "skipped"
    else:
        state = "passed"
    cases.append((float(case.get("time") or 0), case.get("name"), state))
cases.sort(reverse=True)
print(f"the ten slowest of {len(cases)} tests (seconds; the whole table: docs/testing.md):")
for seconds, name, state in cases[:10]:
    print(f"  {seconds:8.1f}  {name}{'' if state == 'passed' else '  (' + state + ')'}")
passed = sum(1 for c in cases if c[2] == "passed")
failed = sum(1 for c in cases if c[2] == "failed")
skipped = sum(1 for c in cases if c[2] == "skipped")
print(f"tests: {passed} passed, {failed} failed, {skipped} skipped")
PY
exit $rc
