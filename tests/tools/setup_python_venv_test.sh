#!/usr/bin/env bash
# Several tests set up the same virtual environment at once under `ctest -j`; every one of them
# must succeed. Runs setup_python_venv.sh 16 times concurrently on one fresh directory, installing
# a wheel built here (no network needed), and checks that all 16 succeed and the package imports.
# Usage: setup_python_venv_test.sh SOURCE_DIR
set -uo pipefail
src=${1:?usage: setup_python_venv_test.sh SOURCE_DIR}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

python3 - "$work" <<'PY'
import sys, zipfile
name, work = "cohort_venv_probe", sys.argv[1]
with zipfile.ZipFile(f"{work}/{name}-1.0-py3-none-any.whl", "w") as z:
    files = {
        f"{name}.py": "VALUE = 42\n",
        f"{name}-1.0.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n",
        f"{name}-1.0.dist-info/WHEEL":
            "Wheel-Version: 1.0\nGenerator: cohort-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    for path, text in files.items():
        z.writestr(path, text)
    z.writestr(f"{name}-1.0.dist-info/RECORD", "".join(f"{p},,\n" for p in [*files, f"{name}-1.0.dist-info/RECORD"]))
PY

pids=()
for i in $(seq 1 16); do
  bash "$src/tests/setup_python_venv.sh" "$work/venv" cohort_venv_probe \
    --no-index "$work/cohort_venv_probe-1.0-py3-none-any.whl" >"$work/out.$i" 2>&1 &
  pids+=($!)
done
failed=0
for i in "${!pids[@]}"; do
  if ! wait "${pids[$i]}"; then
    echo "concurrent setup #$((i + 1)) failed:"
    cat "$work/out.$((i + 1))"
    failed=1
  fi
done
[ $failed -eq 0 ] || exit 1
value=$("$work/venv/bin/python" -c "import cohort_venv_probe; print(cohort_venv_probe.VALUE)")
if [ "$value" != 42 ]; then
  echo "the environment does not import the package (got '$value')"
  exit 1
fi
echo "16 concurrent setups of one environment all succeeded"
