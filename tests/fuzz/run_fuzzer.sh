#!/usr/bin/env bash
# Runs one fuzz target of the clang sub-build for ctest (tests/fuzz/CMakeLists.txt).
#
#   run_fuzzer.sh smoke   FUZZER CORPUS REGRESSIONS WORK SECONDS [SKIP_REASON]
#       fuzzes for SECONDS from the seeds in CORPUS (and the inputs in REGRESSIONS); new inputs go
#       to WORK/smoke/corpus, never into the source tree
#   run_fuzzer.sh regress FUZZER CORPUS REGRESSIONS WORK 0 [SKIP_REASON]
#       runs every seed and regression input once
#
# Exits 77 (ctest: skipped) with SKIP_REASON when the fuzzers could not be built. On a finding it
# prints how to reproduce it and how to keep it as a regression input.
set -uo pipefail
mode="$1" fuzzer="$2" corpus="$3" regressions="$4" work="$5" seconds="$6" reason="${7:-}"
target="$(basename "$fuzzer" _fuzzer)"
here="$(cd "$(dirname "$0")" && pwd)"

if [ -n "$reason" ]; then
  echo "SKIPPED: fuzz target $target was not built: $reason"
  exit 77
fi
if [ ! -x "$fuzzer" ]; then
  echo "$fuzzer is missing: build first (make build, or cmake --build BUILD_DIR --target clang-subbuild)" >&2
  exit 1
fi

dir="$work/$mode"
rm -rf "$dir"
mkdir -p "$dir/corpus" "$dir/artifacts"
# libFuzzer exits 77 on a finding by default, which ctest would count as a skip (SKIP_RETURN_CODE
# 77 is for fuzzers that could not be built): findings exit 1.
flags=(-timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -print_funcs=0 -error_exitcode=1
       -timeout_exitcode=1 "-artifact_prefix=$dir/artifacts/")
if [ -f "$here/dict/$target.dict" ]; then flags+=("-dict=$here/dict/$target.dict"); fi
inputs=("$corpus")
if [ -d "$regressions" ] && [ -n "$(ls -A "$regressions" 2>/dev/null)" ]; then inputs+=("$regressions"); fi

case "$mode" in
  smoke)
    echo "fuzzing $target for ${seconds}s from ${inputs[*]}"
    "$fuzzer" "${flags[@]}" "-max_total_time=$seconds" "$dir/corpus" "${inputs[@]}"
    rc=$?
    ;;
  regress)
    mapfile -t files < <(find "${inputs[@]}" -type f ! -name '.*' | sort)
    echo "running $target once on ${#files[@]} inputs from ${inputs[*]}"
    "$fuzzer" "${flags[@]}" "${files[@]}"
    rc=$?
    ;;
  *)
    echo "unknown mode $mode" >&2
    exit 2
    ;;
esac

if [ "$rc" -ne 0 ]; then
  echo
  echo "FAILED: $target exited with $rc."
  for f in "$dir"/artifacts/*; do
    [ -e "$f" ] || continue
    echo "  finding: $f"
    echo "    reproduce:    $fuzzer $f"
    echo "    keep it as a regression test: cp $f $here/regressions/$target/"
  done
fi
exit "$rc"
