#!/usr/bin/env bash
# The transport issue's targets, side by side in one run (docs/benchmarks.md, "The transport
# issue's targets, side by side"): Cohort's coord-bench against the socket floor (barrier-floor),
# PyTorch's TCPStore driven by its C++ client (tcpstore-bench) and XLA's service (jaxlib, via
# baseline_bench.py), RUNS times each, interleaved so that drift hits every system alike; then
# the service's peak RSS with 16 and with 10,000 tasks. JSON lines on stdout (each tagged with "run");
# bench/transport_report.py turns them into the table of medians.
#   bench/run-transport-comparison.sh [BUILD_DIR] [RUNS] > transport.jsonl
set -euo pipefail
build="${1:-build}"
runs="${2:-3}"
here="$(cd "$(dirname "$0")" && pwd)"
bin="$build/bin"
tcpstore="$build/bench-peers/tcpstore-bench"
[[ -x "$tcpstore" ]] || bash "$here/baselines/build-tcpstore-bench.sh" "$build" >&2
jax_venv="$build/python/jax-0.10.2"
bash "$here/../tests/setup_python_venv.sh" "$jax_venv" jax jax==0.10.2 jaxlib==0.10.2 >&2
tag() { python3 -c 'import json,sys; r=sys.argv[1]
for line in sys.stdin:
    if line.startswith("{"):
        d=json.loads(line); d["run"]=int(r); d.setdefault("implementation", sys.argv[2]); print(json.dumps(d), flush=True)' "$1" "$2"; }
progress() { echo "[transport $(date +%T)] $*" >&2; }
for ((i = 0; i < runs; i++)); do
  for tasks in 1024 4096; do
    progress "run $i: barrier, $tasks tasks"
    "$bin/coord-bench" --workload barrier --tasks "$tasks" --json | tag "$i" cohort
    "$bin/barrier-floor" --tasks "$tasks" | tag "$i" floor
  done
  for workload in rendezvous barrier fanout; do
    progress "run $i: $workload, 1024 tasks, Cohort and TCPStore's C++ client"
    "$bin/coord-bench" --workload "$workload" --tasks 1024 --json | tag "$i" cohort
    "$tcpstore" --workload "$workload" --tasks 1024 2>/dev/null | tag "$i" tcpstore-cpp
  done
  progress "run $i: fanout, 1024 tasks, XLA's service"
  "$jax_venv/bin/python" "$here/baselines/baseline_bench.py" --system xla --workload fanout \
    --tasks 1024 2>/dev/null | tag "$i" xla
  for tasks in 16 10000; do
    progress "run $i: service RSS, barrier, $tasks tasks"
    "$bin/coord-bench" --workload barrier --tasks "$tasks" --rounds 3 --json | tag "$i" cohort
  done
done
