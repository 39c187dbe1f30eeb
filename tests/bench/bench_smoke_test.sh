#!/usr/bin/env bash
# The benchmarks users are told to run (docs/benchmarks.md) start, measure and print what the
# docs say, on a few small sizes: collective-bench standalone with its warm-up (every result
# right), and allreduce-floor with each of its algorithms (one JSON object each).
# Usage: bench_smoke_test.sh BIN_DIR
set -euo pipefail
bin=${1:?usage: bench_smoke_test.sh BIN_DIR}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

"$bin/collective-bench" -n 2 --min-bytes 4K --max-bytes 64K --warmup-ms 20 --no-memcpy --json \
  >"$out/collective.jsonl"
python3 - "$out/collective.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
sizes = sorted({r["bytes"] for r in rows})
assert sizes == [4096, 16384, 65536], f"sizes measured: {sizes}"
assert len(rows) == 6, f"want 3 sizes x 2 placements, got {len(rows)} rows"
for r in rows:
    assert r["wrong"] == 0, f"wrong results: {r}"
    assert r["time_us"] > 0 and r["busbw_gbps"] > 0, r
print("collective-bench: 3 sizes, both placements, every result right")
PY

if "$bin/collective-bench" -n 2 --warmup-ms -1 >"$out/err.txt" 2>&1; then
  echo "collective-bench accepted --warmup-ms -1" >&2
  exit 1
fi
grep -q "warmup-ms" "$out/err.txt" || { cat "$out/err.txt" >&2; exit 1; }

"$bin/allreduce-floor" --sizes 4K,64K --iters 200 --passes 2 --json \
  --algorithms oneshot,ring,pipelined,twophase,nt >"$out/floor.jsonl"
# CMA needs ptrace permission over the peer; where it is refused the tool must say so.
if ! "$bin/allreduce-floor" --sizes 4K,64K --iters 200 --passes 2 --json --algorithms cma \
    >>"$out/floor.jsonl" 2>"$out/cma.txt"; then
  grep -q "ptrace permission" "$out/cma.txt" || { cat "$out/cma.txt" >&2; exit 1; }
  echo "allreduce-floor: cma refused here, and it said why: $(cat "$out/cma.txt")"
  cma=0
else
  cma=1
fi
python3 - "$out/floor.jsonl" "$cma" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
got = {(r["bytes"], r["algorithm"]) for r in rows}
algorithms = ["oneshot", "ring", "pipelined", "twophase", "nt"] + ["cma"] * (sys.argv[2] == "1")
want = {(b, a) for b in (4096, 65536) for a in algorithms}
assert got == want, f"missing: {sorted(want - got)}, extra: {sorted(got - want)}"
for r in rows:
    assert 0 < r["median_us"] <= r["worst_us"], r
print("allreduce-floor: every algorithm at 2 sizes")
PY

if "$bin/allreduce-floor" --sizes 4Q >"$out/err.txt" 2>&1; then
  echo "allreduce-floor accepted --sizes 4Q" >&2
  exit 1
fi
grep -q "unknown unit 'Q'" "$out/err.txt" || { cat "$out/err.txt" >&2; exit 1; }
echo "bench smoke: ok"
