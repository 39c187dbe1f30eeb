#!/usr/bin/env bash
# `make bench`: every coord-bench workload at 1,024 and 4,096 tasks, then operator-bench's two
# workloads, one JSON object per line. docs/benchmarks.md records the figures and how the
# baselines were run.
set -euo pipefail
bin="${1:-build}/bin"
for tasks in 1024 4096; do
  for workload in rendezvous barrier fanout; do
    "$bin/coord-bench" --workload "$workload" --tasks "$tasks" --json
  done
done
for workload in large-job many-jobs; do
  "$bin/operator-bench" --workload "$workload"
done
