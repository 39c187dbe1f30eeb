#!/usr/bin/env bash
# Cohort's images as users get them (docs/images.md): `make images` (scripts/build-images.sh)
# builds every Dockerfile target with podman; each runs its entrypoint as the user the chart
# expects; and examples/out-of-tree, built FROM the libdist image inside a container, runs as a
# 2-process job there under cohort-run with its sidecars, with no network.
# Usage: images_test.sh SOURCE_DIR BUILD_DIR. Exit 77 (skipped, saying why) where podman cannot run.
set -euo pipefail
src=${1:?usage: images_test.sh SOURCE_DIR BUILD_DIR}
build=${2:?usage: images_test.sh SOURCE_DIR BUILD_DIR}
export CONTAINERS_CONF="$src/images/containers.conf"

skip() { echo "SKIPPED: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }

command -v podman >/dev/null || skip "podman is not installed (make deps installs it on Debian)"
podman info >/dev/null 2>&1 || skip "podman cannot run here: $(podman info 2>&1 | tail -1)"
[ "$(id -u)" -eq 0 ] || skip "the image builds need root here (podman as root with runc; debootstrap)"

if ! bash "$src/scripts/build-images.sh" "$build" base; then
  # Without a registry and without Debian's mirror there is nothing to make a base image from.
  if ! timeout 20 curl -fsS -o /dev/null http://deb.debian.org/debian/dists/bookworm/Release; then
    skip "no registry answers and Debian's mirror cannot be reached: no base image can be made"
  fi
  fail "the base image could not be made"
fi
podman run --rm --network none localhost/debian:bookworm true ||
  skip "podman cannot run a container of the base image here (see its error above)"
bash "$src/scripts/build-images.sh" "$build" || fail "make images failed"

# Each image exists, runs its entrypoint, and as whom.
for name in operator sidecar demo; do
  image="localhost/cohort-$name:dev"
  user=$(podman image inspect --format '{{.Config.User}}' "$image") || fail "$image was not built"
  [ "$user" = "65532:65532" ] || fail "$image runs as '$user', not 65532:65532 (non-root, as the chart expects)"
  out=$(podman run --rm --network none "$image" --help 2>&1) || { echo "$out"; fail "$image: its entrypoint does not run"; }
  grep -q "^Usage: /usr/local/bin/" <<<"$out" || { echo "$out"; fail "$image: no usage from its entrypoint"; }
done
for tool in cohort-run cohort-launch; do
  podman run --rm --network none --entrypoint "/usr/local/bin/$tool" localhost/cohort-sidecar:dev --help >/dev/null 2>&1 ||
    fail "the sidecar image's $tool does not run"
done

# A trainer's image FROM cohort-libdist, built and run inside containers.
podman build -q --network host -f "$src/tests/containers/out-of-tree.Containerfile" \
  -t localhost/cohort-test-out-of-tree:dev "$src/examples/out-of-tree" >/dev/null ||
  fail "examples/out-of-tree did not build FROM localhost/cohort-libdist:dev"
out=$(podman run --rm --network none localhost/cohort-test-out-of-tree:dev \
  cohort-run -n 2 --initialization-timeout 60s -- /build/my-trainer 5 2>&1) || {
  echo "$out"; fail "the out-of-tree trainer failed under cohort-run in its container"; }
for rank in 0 1; do
  grep -q "rank $rank of 2 (restart attempt 0) heard from 2 processes and ran 5 steps (all-reduced total 5)" <<<"$out" ||
    { echo "$out"; fail "rank $rank did not report"; }
done
grep -q "all 2 processes finished successfully" <<<"$out" || { echo "$out"; fail "the job did not succeed"; }
podman rmi -f localhost/cohort-test-out-of-tree:dev >/dev/null 2>&1 || true

podman images --filter reference='localhost/cohort-*:dev' --format '{{.Repository}}:{{.Tag}} {{.Size}}'
echo "every image built and ran; examples/out-of-tree built FROM cohort-libdist ran as a 2-process job in its container"
