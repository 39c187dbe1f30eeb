#!/usr/bin/env bash
# `make demo` as a user runs it, from the source tree with this build directory: the packages
# checked, the demo's binaries built (nothing to do after `make build`), the job run through an
# eviction by examples/run-demo.sh. Passes only when the demo ends with its "demo OK" summary.
# Usage: demo_test.sh SOURCE_DIR BUILD_DIR RUNTIME   (process, or podman: exit 77 where podman
# cannot run containers here, saying why)
set -uo pipefail
src=${1:?usage: demo_test.sh SOURCE_DIR BUILD_DIR RUNTIME}
build=${2:?usage: demo_test.sh SOURCE_DIR BUILD_DIR RUNTIME}
runtime=${3:?usage: demo_test.sh SOURCE_DIR BUILD_DIR RUNTIME}

if [ "$runtime" = podman ]; then
  export CONTAINERS_CONF="$src/images/containers.conf"
  command -v podman >/dev/null || { echo "SKIPPED: podman is not installed (make deps installs it)"; exit 77; }
  podman info >/dev/null 2>&1 || { echo "SKIPPED: podman cannot run here: $(podman info 2>&1 | tail -n 1)"; exit 77; }
  podman image exists localhost/debian:bookworm ||
    { echo "SKIPPED: no base image for the demo's images (images_build_and_run says why)"; exit 77; }
fi

log=$(mktemp)
trap 'rm -f "$log"' EXIT
# What the user sees, as it happens (tee reads to the end); kept to check the summary.
make -C "$src" --no-print-directory demo BUILD_DIR="$build" RUNTIME="$runtime" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
if [ "$rc" -ne 0 ]; then
  echo "FAIL: make demo RUNTIME=$runtime exited with $rc" >&2
  exit 1
fi
# The summary's last lines: the verdict the script prints only when every check held.
if ! grep -q "^demo OK: " <<<"$(tail -n 4 "$log")"; then
  echo "FAIL: make demo RUNTIME=$runtime exited 0 without its 'demo OK' summary at the end" >&2
  exit 1
fi
echo "PASS: make demo RUNTIME=$runtime ended with 'demo OK'"
