#!/usr/bin/env bash
# A 1,024-rank job as 128 pods x 8 processes beside 1,024 pods x 1, interleaved run by run
# (docs/benchmarks.md "Pods of several processes"):
#   - coord-bench rendezvous: every rank registered (registered_seconds) and met (seconds), the
#     service's peak RSS; the ranks of a pod share one connection, as a sidecar's agents do;
#   - operator-bench large-job: pods created, the operator's peak RSS;
#   - the sidecars' memory: real cohort-sidecars under cohort-run, 8 ranks as one pod of 8
#     (one sidecar) and as 8 pods of 1 (8 sidecars), their summed RSS while the ranks wait.
# One JSON object per line; bench/pod_shape_report.py prints the medians and worst runs.
#   bash bench/run-pod-shape-comparison.sh [BUILD_DIR] [RUNS] > /tmp/pod-shape.jsonl
set -euo pipefail
build=${1:-build}
runs=${2:-5}
bin="$build/bin"

# The summed VmRSS (bytes) of the sidecars of a cohort-run job of 8 ranks in pods of $1, measured
# once every rank printed WAITING.
sidecar_rss() {
  local per_pod=$1 work out pids rss=0
  work=$(mktemp -d /tmp/cohort-pod-shape-XXXXXX)
  out="$work/out.log"
  "$bin/cohort-run" -n 8 --processes-per-pod "$per_pod" --work-dir "$work/job" -- \
    "$bin/test-trainer" wait >"$out" 2>&1 &
  local launcher=$!
  for _ in $(seq 1 600); do
    [ "$(grep -c '\] WAITING' "$out" || true)" -ge 8 ] && break
    sleep 0.05
  done
  pids=$(pgrep -f "cohort-sidecar.*$work/job" || true)
  for p in $pids; do
    rss=$((rss + $(awk '/^VmRSS/ { print $2 * 1024 }' "/proc/$p/status")))
  done
  # Its children die with it (PR_SET_PDEATHSIG).
  kill -KILL "$launcher" 2>/dev/null || true
  wait "$launcher" 2>/dev/null || true
  rm -rf "$work"
  printf '{"bench":"sidecar-rss","ranks":8,"processes_per_pod":%d,"sidecars":%d,"sidecar_rss_bytes":%d}\n' \
    "$per_pod" "$(echo "$pids" | wc -w)" "$rss"
}

for run in $(seq 1 "$runs"); do
  for per_pod in 8 1; do
    "$bin/coord-bench" --workload rendezvous --tasks 1024 --processes-per-pod "$per_pod" --json |
      sed 's/^{/{"bench":"coord-bench",/'
    "$bin/operator-bench" --workload large-job --ranks 1024 --processes-per-pod "$per_pod" 2>/dev/null |
      grep '^{' |
      sed 's/^{/{"bench":"operator-bench",/'
    sidecar_rss "$per_pod"
  done
done
