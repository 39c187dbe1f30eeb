#!/usr/bin/env bash
# `make bench`: every coord-bench workload at 1,024 and 4,096 tasks, operator-bench's two
# workloads, and collective-bench's all-reduce on 2 and 4 ranks (shared memory and TCP), one JSON
# object per line. bench/run-collective-comparison.sh adds the collectives' peers. docs/benchmarks.md records the figures and how the
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
for ranks in 2 4; do
  for transport in shm tcp; do
    "$bin/collective-bench" -n "$ranks" --transport "$transport" --json
  done
done
