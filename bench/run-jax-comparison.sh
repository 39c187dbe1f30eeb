#!/usr/bin/env bash
# Unmodified JAX clients (jaxlib's DistributedRuntimeClient) against JAX's own coordination
# service and against Cohort's (a real cohort-sidecar's JAX port), side by side in one run:
# rendezvous, barrier and fanout at 256 and 1,024 tasks, RUNS times each, alternating the two
# systems; then the kill-to-abort time (one of two processes killed; the other terminated by its
# JAX client), Cohort RUNS times and JAX's own once (it waits for its 100 s heartbeat timeout).
# JSON lines on stdout; docs/benchmarks.md records the medians.
#   bench/run-jax-comparison.sh [BUILD_DIR] [RUNS]
set -euo pipefail
build="${1:-build}"
runs="${2:-3}"
here="$(cd "$(dirname "$0")" && pwd)"
venv="$build/python/jax-0.10.2"
bash "$here/../tests/setup_python_venv.sh" "$venv" jax jax==0.10.2 jaxlib==0.10.2 >&2
bench() {
  "$venv/bin/python" "$here/baselines/baseline_bench.py" --cohort-sidecar "$build/bin/cohort-sidecar" \
    "$@" 2>/dev/null | grep '^{'
}
for tasks in 256 1024; do
  for workload in rendezvous barrier fanout; do
    for ((i = 0; i < runs; i++)); do
      for system in xla cohort-jax; do
        bench --system "$system" --workload "$workload" --tasks "$tasks"
      done
    done
  done
done
for ((i = 0; i < runs; i++)); do bench --system cohort-jax --workload kill --tasks 2; done
bench --system xla --workload kill --tasks 2
