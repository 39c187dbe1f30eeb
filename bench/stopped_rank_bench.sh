#!/usr/bin/env bash
# A rank stopped with SIGSTOP inside an all-reduce, as users run jobs on one machine: `cohort-run
# -n RANKS` (real sidecars, the host backend), COHORT_COLLECTIVE_TIMEOUT=TIMEOUT, FLOATS float32s
# per all-reduce (default 4,194,304: 16 MiB). The last rank enters the all-reduce and is stopped
# there; the others enter a second later and wait. Measured per run, from the others' entry: when
# rank 0 prints the job's failure (the watchdog named the stopped rank; docs/faults.md promises
# within the timeout + 1 s) and when cohort-run has exited (the job ended; within the timeout +
# 2 s). One JSON object: every run, the median and the worst of each.
#
# Usage: bench/stopped_rank_bench.sh [BUILD_DIR] [RUNS] [RANKS] [TIMEOUT_S] [FLOATS]
# The program is test-trainer's collective-stop-inside scenario (tests/integration/).
set -euo pipefail
build=${1:-build}
runs=${2:-5}
ranks=${3:-4}
timeout_s=${4:-5}
floats=${5:-4194304}
bin="$build/bin"
for tool in cohort-run cohort-sidecar test-trainer; do
  if [[ ! -x "$bin/$tool" ]]; then
    echo "stopped_rank_bench: $bin/$tool is missing: build it first (make build)" >&2
    exit 2
  fi
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Prints "<named s> <ended s>" for one run.
run_once() {
  local out="$work/out" last=$((ranks - 1)) pid="" p
  : > "$out"
  (COHORT_COLLECTIVE_TIMEOUT="${timeout_s}s" COHORT_TEST_ALLREDUCE_FLOATS="$floats" \
    "$bin/cohort-run" -n "$ranks" --cpu-bind none -- "$bin/test-trainer" collective-stop-inside 2>&1 |
    while IFS= read -r line; do printf '%s %s\n' "$(date +%s.%N)" "$line"; done > "$out") &
  local runner=$!
  local deadline=$((SECONDS + 60))
  until grep -q "\[rank $last\] IN_COLLECTIVE" "$out"; do
    if ((SECONDS > deadline)); then
      echo "stopped_rank_bench: rank $last never entered the all-reduce; its output:" >&2
      cat "$out" >&2
      return 1
    fi
    sleep 0.02  # The job's output is a file a subshell appends to: nothing to wait on.
  done
  for p in $(pgrep -f "test-trainer collective-stop-inside"); do
    local environment
    environment=$(tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null || true)
    if grep -qx "COHORT_PROCESS_ID=$last" <<<"$environment"; then pid=$p; fi
  done
  if [[ -z "$pid" ]]; then
    echo "stopped_rank_bench: no process of rank $last to stop" >&2
    return 1
  fi
  kill -STOP "$pid"
  wait "$runner" || true
  local entered named ended
  entered=$(grep "\[rank 0\] IN_COLLECTIVE" "$out" | tail -1 | cut -d' ' -f1)
  named=$(grep -m1 "\[rank 0\] cohort: the job failed" "$out" | cut -d' ' -f1)
  ended=$(tail -1 "$out" | cut -d' ' -f1)
  if [[ -z "$entered" || -z "$named" ]]; then
    echo "stopped_rank_bench: the run did not go as planned; its output:" >&2
    cat "$out" >&2
    return 1
  fi
  echo "$(echo "$named - $entered" | bc) $(echo "$ended - $entered" | bc)"
}

results=()
for ((i = 1; i <= runs; i++)); do
  echo "stopped_rank_bench: run $i of $runs" >&2
  results+=("$(run_once)")
done
printf '%s\n' "${results[@]}" | python3 -c '
import json, statistics, sys
runs = [tuple(float(x) for x in line.split()) for line in sys.stdin if line.strip()]
named = [r[0] for r in runs]
ended = [r[1] for r in runs]
timeout, ranks, floats = float(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
print(json.dumps({
    "bench": "stopped_rank", "launcher": "cohort-run", "backend": "host", "ranks": ranks,
    "floats": floats, "collective_timeout_s": timeout,
    "named_s": {"runs": named, "median": statistics.median(named), "worst": max(named),
                "bound": timeout + 1},
    "ended_s": {"runs": ended, "median": statistics.median(ended), "worst": max(ended),
                "bound": timeout + 2},
}))' "$timeout_s" "$ranks" "$floats"
