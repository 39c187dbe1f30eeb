#!/usr/bin/env bash
# collective-bench against its CPU peers, side by side in one run (docs/benchmarks.md):
#
#   bench/run-collective-comparison.sh [RUNS] [RANKS...]     (default: 3 runs, P = 2 and 4)
#
# Each run measures, for each P: Cohort over shared memory and Cohort forced to TCP, each as users
# run it (collective-bench as a job under cohort-run, with a sidecar per rank and cohort-run's
# default CPU binding; the shared-memory run also measures the concurrent-memcpy ceiling), then
# OpenMPI, Intel MPI and gloo with their launchers' defaults (bench/baselines/
# run-collective-peers.sh, which installs them on first use). All JSON lines, tagged with their
# run, go to $COHORT_BENCH_WORK/comparison.jsonl; bench/collective_report.py then prints the
# medians over runs as the tables of docs/benchmarks.md, with the targets of issue 9 checked.
# Run it on an otherwise idle machine: figures here drift by 30% from day to day, so only the
# ratios within one run mean anything.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
build="${COHORT_BUILD_DIR:-$repo/build}"
work="${COHORT_BENCH_WORK:-$build/bench-peers}"
export COHORT_BENCH_WORK="$work"
runs="${1:-3}"
shift || true
if [[ $# -eq 0 ]]; then set -- 2 4; fi
bench="$build/bin/collective-bench"
cohort_run="$build/bin/cohort-run"
for b in "$bench" "$cohort_run"; do
  [[ -x "$b" ]] || { echo "run-collective-comparison: build first ($b is missing)" >&2; exit 2; }
done
mkdir -p "$work"
out="$work/comparison.jsonl"
: >"$out"
tag() { python3 -c 'import json,sys
run=int(sys.argv[1])
for line in sys.stdin:
    line=line.strip()
    if line.startswith("[rank 0] "):  # collective-bench under cohort-run: rank 0 reports.
        line=line[len("[rank 0] "):]
    if line.startswith("{"):
        d=json.loads(line); d["run"]=run; print(json.dumps(d), flush=True)' "$1"; }
for run in $(seq 1 "$runs"); do
  for p in "$@"; do
    echo "run $run/$runs, P=$p: cohort (shm)" >&2
    "$cohort_run" -n "$p" -- "$bench" --json --transport shm 2>&1 | tag "$run" >>"$out"
    echo "run $run/$runs, P=$p: cohort (tcp)" >&2
    "$cohort_run" -n "$p" -- "$bench" --json --transport tcp --no-memcpy 2>&1 | tag "$run" >>"$out"
    echo "run $run/$runs, P=$p: peers" >&2
    "$here/baselines/run-collective-peers.sh" "$p" | tag "$run" >>"$out"
  done
done
python3 "$here/collective_report.py" "$out"
