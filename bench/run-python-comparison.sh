#!/usr/bin/env bash
# The cohort package's cost over libdist, and beside torch.distributed's gloo, in one run
# (docs/benchmarks.md, "The Python package"):
#
#   bench/run-python-comparison.sh [RUNS] [PYTHON]     (default: 5 runs; the python of
#                                                       build/python/cohort-test, which
#                                                       `ctest -R python_package` makes)
#
# Each run, under `cohort-run -n 2` (sidecars, default CPU binding): bench/python_bench.py
# (key-value set+get, alone and in turn with the same pair from C++ in the same process through
# libcohort-kv-pair-shim.so; all-reduce on numpy and on torch tensors, gloo on the same tensors),
# then collective-bench and store-latency (the same measurements from C++ programs). The JSON lines, tagged
# with their run, go to $COHORT_BENCH_WORK/python-comparison.jsonl; the report prints the medians
# and the worst run, and checks the package's targets.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
build="${COHORT_BUILD_DIR:-$repo/build}"
runs="${1:-5}"
python="${2:-$build/python/cohort-test/bin/python}"
work="${COHORT_BENCH_WORK:-$build/bench-peers}"
[[ -x "$python" ]] || { echo "run-python-comparison: no $python (run ctest -R python_package first, or name a python with cohort and torch)" >&2; exit 2; }
for b in bin/cohort-run bin/collective-bench bin/store-latency lib/libcohort-kv-pair-shim.so; do
  [[ -e "$build/$b" ]] || { echo "run-python-comparison: build first ($build/$b is missing)" >&2; exit 2; }
done
mkdir -p "$work"
out="$work/python-comparison.jsonl"
: >"$out"
tag() {  # tag RUN: rank 0's JSON lines, with the run number
  python3 -c 'import json,sys
for line in sys.stdin:
    line = line.strip()
    if line.startswith("[rank 0] "):
        line = line[len("[rank 0] "):]
    if line.startswith("{"):
        d = json.loads(line); d["run"] = int(sys.argv[1]); print(json.dumps(d), flush=True)' "$1"
}
for run in $(seq 1 "$runs"); do
  echo "run $run/$runs: python" >&2
  "$build/bin/cohort-run" -n 2 -- "$python" "$here/python_bench.py" \
    --kv-paired "$build/lib/libcohort-kv-pair-shim.so" 2>&1 | tag "$run" >>"$out"
  echo "run $run/$runs: c++" >&2
  "$build/bin/cohort-run" -n 2 -- "$build/bin/collective-bench" --json --no-memcpy 2>&1 |
    tag "$run" >>"$out"
  "$build/bin/cohort-run" -n 2 -- "$build/bin/store-latency" --json 2>&1 | tag "$run" >>"$out"
done
python3 "$here/python_report.py" "$out"
