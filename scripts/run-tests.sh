#!/usr/bin/env bash
# `make test` after the build: every test with ctest, then what a CI log should show every time so
# that a regression in the suite's cost is seen where it happens: how long `make test` took (the
# packages and the build, then the tests), and the ten slowest tests (docs/testing.md, "Where the
# time goes").
#
# The clang sub-build (thread-safety check, fuzz targets: cmake/ClangSubbuild.cmake) is not built
# yet when this starts. It builds at idle priority (SCHED_IDLE, nice 19) beside the tests that do
# not need it, which spend most of their time waiting on clocks and sockets (the end-to-end tests
# keep about one core of two busy); the tests that need it (label clang-subbuild) run once it is
# built. A sub-build that fails (a thread-safety finding) fails `make test`, with its log's end.
# With CTEST_ARGS the sub-build comes first and one ctest runs with them.
#
# Usage: run-tests.sh BUILD_DIR JOBS START_EPOCH BUILT_EPOCH [CTEST_ARGS...]
#   START_EPOCH: when `make test` started (date +%s); BUILT_EPOCH: when its build ended.
# Exits non-zero when a test or the sub-build failed.
set -uo pipefail
usage="usage: run-tests.sh BUILD_DIR JOBS START_EPOCH BUILT_EPOCH [CTEST_ARGS...]"
build=${1:?$usage}
jobs=${2:?$usage}
started=${3:?$usage}
built=${4:?$usage}
shift 4

build=$(cd "$build" && pwd)
mkdir -p "$build/Testing"
junits=()
rc=0
# ctest over the tests of "$@" into the JUnit file $1.
run_ctest() {
  local junit="$build/Testing/$1"
  shift
  rm -f "$junit"
  junits+=("$junit")
  (cd "$build" && ctest --output-on-failure -j "$jobs" --timeout 600 --output-junit "$junit" "$@") || rc=1
}

subbuild_note=""
if [ $# -gt 0 ]; then
  cmake --build "$build" -j "$jobs" --target clang-subbuild || exit 1
  run_ctest ctest-junit.xml "$@"
else
  log="$build/clang-subbuild.log"
  idle=(nice -n 19)
  if chrt --idle 0 true 2>/dev/null; then idle=(chrt --idle 0 nice -n 19); fi
  echo "the clang sub-build (thread-safety check, fuzz targets) builds at idle priority beside the" \
    "tests; its log: $log"
  sub_started=$(date +%s)
  # A session of its own, so that stopping `make test` stops the compilers too; when it ends, the
  # time goes into $log.ended.
  rm -f "$log.ended"
  setsid "${idle[@]}" bash -c 'cmake --build "$1" -j "$2" --target clang-subbuild; rc=$?
                              date +%s >"$3.ended"; exit $rc' _ "$build" "$jobs" "$log" >"$log" 2>&1 &
  sub_pid=$!
  trap 'kill -- "-$sub_pid" 2>/dev/null' EXIT
  run_ctest ctest-junit.xml -LE '^clang-subbuild$'
  if kill -0 "$sub_pid" 2>/dev/null; then
    echo "waiting for the clang sub-build (started $(($(date +%s) - sub_started)) s ago; $log)"
  fi
  sub_rc=0
  wait "$sub_pid" || sub_rc=$?
  trap - EXIT
  sub_ended=$(cat "$log.ended" 2>/dev/null || date +%s)
  sub_s=$((sub_ended - sub_started))
  if [ "$sub_rc" -ne 0 ]; then
    echo
    echo "FAILED: the clang sub-build exited with $sub_rc (a thread-safety finding, or a file clang"
    echo "cannot compile); the end of $log:"
    tail -n 40 "$log"
    rc=1
    subbuild_note="the clang sub-build FAILED after ${sub_s}s beside the tests"
  else
    subbuild_note="the clang sub-build took ${sub_s}s at idle priority beside the tests"
    run_ctest ctest-junit-clang-subbuild.xml -L '^clang-subbuild$'
  fi
fi
ended=$(date +%s)

python3 - "$started" "$built" "$ended" "$subbuild_note" "${junits[@]}" <<'PY'
import sys
import xml.etree.ElementTree as ET

started, built, ended = map(int, sys.argv[1:4])
note, junits = sys.argv[4], sys.argv[5:]
def minutes(s):
    return f"{s // 60}m{s % 60:02d}s"
print()
print(f"make test took {minutes(ended - started)}: packages and build {minutes(built - started)}, "
      f"tests {minutes(ended - built)}{' (' + note + ')' if note else ''}")
cases = []
for junit in junits:
    try:
        root = ET.parse(junit).getroot()
    except (OSError, ET.ParseError) as e:
        print(f"(no per-test times from {junit}: {e})")
        continue
    cases.extend(root.iter("testcase"))
rows = []
for case in cases:
    state = case.get("status", "run")
    if case.find("failure") is not None:
        state = "failed"
    elif case.find("skipped") is not None or state in ("notrun", "disabled"):
        state = "skipped"
    else:
        state = "passed"
    rows.append((float(case.get("time") or 0), case.get("name"), state))
rows.sort(reverse=True)
print(f"the ten slowest of {len(rows)} tests (seconds; the whole table: docs/testing.md):")
for seconds, name, state in rows[:10]:
    print(f"  {seconds:8.1f}  {name}{'' if state == 'passed' else '  (' + state + ')'}")
passed = sum(1 for c in rows if c[2] == "passed")
failed = sum(1 for c in rows if c[2] == "failed")
skipped = sum(1 for c in rows if c[2] == "skipped")
print(f"tests: {passed} passed, {failed} failed, {skipped} skipped")
PY
exit $rc
