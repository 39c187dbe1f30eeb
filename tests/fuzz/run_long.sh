#!/usr/bin/env bash
# `make fuzz`: runs each fuzz target of the clang sub-build for a long while, keeping its corpus
# under the build directory, and prints a table of executions and findings (the format of the
# table in docs/testing.md). A finding (crash, leak, timeout, out of memory) is copied into
# tests/fuzz/regressions/<target>/, where the fuzz_<target>_regressions and fuzz_replay_<target>
# tests run it from then on: fix the bug, keep the file.
#
#   run_long.sh BUILD_DIR SECONDS PARALLEL [TARGET...]
#
# PARALLEL targets run at once (each uses one core). Extra libFuzzer flags: FUZZ_FLAGS.
set -uo pipefail
build="$(cd "$1" && pwd)"
seconds="$2"
parallel="$3"
shift 3
here="$(cd "$(dirname "$0")" && pwd)"
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(coordination_service agent_protocol distributed_job kube_json)
fi
bin="$build/clang/fuzz"
work="$build/fuzz"

for t in "${targets[@]}"; do
  if [ ! -x "$bin/${t}_fuzzer" ]; then
    echo "$bin/${t}_fuzzer is missing: the fuzz targets need clang and libFuzzer (Debian: clang," \
         "libclang-rt-14-dev; scripts/install-deps.sh installs them), then a build (make build)." >&2
    exit 1
  fi
done

run_one() {
  local t="$1"
  local corpus="$work/corpus/$t" artifacts="$work/artifacts/$t" log="$work/logs/$t.log"
  mkdir -p "$corpus" "$artifacts" "$work/logs"
  rm -f "$artifacts"/*
  local inputs=("$here/corpus/$t")
  if [ -n "$(ls -A "$here/regressions/$t" 2>/dev/null | grep -v '^\.')" ]; then inputs+=("$here/regressions/$t"); fi
  local dict=()
  if [ -f "$here/dict/$t.dict" ]; then dict=("-dict=$here/dict/$t.dict"); fi
  # shellcheck disable=SC2086
  "$bin/${t}_fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -print_funcs=0 "${dict[@]}" "-artifact_prefix=$artifacts/" ${FUZZ_FLAGS:-} "$corpus" "${inputs[@]}" \
    >"$log" 2>&1
  echo "$?" >"$log.rc"
}

echo "fuzzing ${targets[*]} for ${seconds}s each, $parallel at a time; logs in $work/logs/"
running=0
for t in "${targets[@]}"; do
  run_one "$t" &
  running=$((running + 1))
  if [ "$running" -ge "$parallel" ]; then
    wait -n
    running=$((running - 1))
  fi
done
wait

status=0
echo
echo "| target | seconds | executions | exec/s | coverage (edges) | corpus | findings |"
echo "|---|---|---|---|---|---|---|"
for t in "${targets[@]}"; do
  log="$work/logs/$t.log"
  execs=$(grep -a 'stat::number_of_executed_units' "$log" | awk '{print $2}' | tail -1)
  rate=$(grep -a 'stat::average_exec_per_sec' "$log" | awk '{print $2}' | tail -1)
  cov=$(grep -aoE 'cov: [0-9]+' "$log" | tail -1 | awk '{print $2}')
  corpus=$(find "$work/corpus/$t" -type f | wc -l)
  findings=()
  for f in "$work/artifacts/$t"/*; do
    [ -e "$f" ] || continue
    findings+=("$(basename "$f")")
    mkdir -p "$here/regressions/$t"
    cp "$f" "$here/regressions/$t/"
  done
  if [ ${#findings[@]} -gt 0 ] || [ "$(cat "$log.rc")" != 0 ]; then status=1; fi
  echo "| $t | $seconds | ${execs:-?} | ${rate:-?} | ${cov:-?} | $corpus | ${#findings[@]}${findings:+ (${findings[*]})} |"
done
if [ "$status" -ne 0 ]; then
  echo
  echo "Findings were copied into $here/regressions/<target>/; each log's end shows the report."
  echo "Reproduce one with: $bin/<target>_fuzzer <file>"
fi
exit "$status"
