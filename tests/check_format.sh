#!/usr/bin/env bash
# The C++ format check (.clang-format: Google style, 100 columns; docs/testing.md, "Format").
#
#   tests/check_format.sh            every C++ file the repository tracks (what CI runs)
#   tests/check_format.sh BASE       only the lines changed since BASE (a commit or branch)
#
# Prints what clang-format would change and exits 1 when anything would; 0 when all is formatted;
# 77 when clang-format is not installed (scripts/install-deps.sh installs it). Fix with
# `git clang-format BASE` (the changed lines) or `clang-format -i FILE`.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v clang-format > /dev/null; then
  echo "SKIPPED: clang-format is not installed (bash scripts/install-deps.sh installs it)"
  exit 77
fi
if [ $# -ge 1 ]; then
  diff=$(git clang-format --diff --extensions cc,h,cu,cuh "$1" -- || true)
  if [ -z "$diff" ] || [[ "$diff" == "no modified files to format" ]] ||
     [[ "$diff" == "clang-format did not modify any files" ]]; then
    echo "the lines changed since $1 are formatted"
    exit 0
  fi
  echo "$diff"
  echo "FAILED: the lines above, changed since $1, are not formatted: run git clang-format $1"
  exit 1
fi
mapfile -t files < <(git ls-files '*.cc' '*.h' '*.cu' '*.cuh')
report=$(mktemp)
trap 'rm -f "$report"' EXIT
if ! clang-format --dry-run --Werror "${files[@]}" 2> "$report"; then
  head -c 20000 "$report"
  echo
  count=$(grep -c "error: code should be clang-formatted" "$report" || true)
  echo "FAILED: $count places are not formatted as .clang-format says: run clang-format -i on the files named above"
  exit 1
fi
echo "all ${#files[@]} C++ files are formatted"
