#!/usr/bin/env bash
# `make demo`: four demo trainers under cohort-run on this machine. Mid-run, one rank gets
# SIGTERM (as a preempted pod would); every rank agrees on the same checkpoint step, writes its
# checkpoint, shuts down together, and a summary is printed.
set -euo pipefail
build_dir=${1:-build}
bin="$build_dir/bin"
work=$(mktemp -d "${TMPDIR:-/tmp}/cohort-demo-XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/pids" "$work/checkpoints"
ranks=4
victim=2

echo "== Cohort demo: $ranks ranks, each with its cohort-sidecar; rank $victim is preempted mid-run =="
"$bin/cohort-run" -n "$ranks" -- "$bin/demo-trainer" --steps 500 --step-ms 20 \
  --checkpoint-dir "$work/checkpoints" --pid-dir "$work/pids" | tee "$work/log" &
run_pid=$!

# Preempt once training is under way (the trainer prints rank 0's progress every 50 steps).
for _ in $(seq 1 600); do
  if grep -q "step 100/" "$work/log" 2>/dev/null; then break; fi
  if ! kill -0 "$run_pid" 2>/dev/null; then break; fi
  sleep 0.05
done
if [ -f "$work/pids/rank-$victim.pid" ]; then
  echo "== demo: sending SIGTERM to rank $victim (pid $(cat "$work/pids/rank-$victim.pid")) =="
  kill -TERM "$(cat "$work/pids/rank-$victim.pid")"
fi
status=0
wait "$run_pid" || status=$?

echo
echo "== Summary =="
printf "%-6s %-8s %-16s %-9s %-10s %-10s\n" rank steps checkpoint_step barriers init_ms train_ms
grep -o "RESULT .*" "$work/log" | sort -t= -k2 -n | while read -r _ fields; do
  eval "$fields"
  printf "%-6s %-8s %-16s %-9s %-10s %-10s\n" "$rank" "$steps" "$checkpoint_step" "$barriers" \
    "$init_ms" "$train_ms"
done
sync_steps=$(grep -o "checkpoint_step=[0-9-]*" "$work/log" | sort -u | wc -l)
checkpoints=$(ls "$work/checkpoints" | wc -l)
echo "checkpoint files: $checkpoints of $ranks; distinct checkpoint steps: $sync_steps"
if [ "$status" -ne 0 ] || [ "$checkpoints" -ne "$ranks" ] || [ "$sync_steps" -ne 1 ]; then
  echo "demo FAILED (cohort-run exit $status)"
  exit 1
fi
echo "demo OK: every rank checkpointed at the same step and shut down together"
