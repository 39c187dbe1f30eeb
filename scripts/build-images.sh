#!/usr/bin/env bash
# `make images`: Cohort's images from the binaries `make build` made, built with podman and tagged
# localhost/cohort-<target>:dev, and also with the release name the chart, the operator's defaults
# and the example manifests use, ghcr.io/cohort-dev/cohort-<target>:<version>, so that they run
# unchanged on the local control plane's podman runtime (docs/images.md). Takes seconds once the
# base layers are cached.
#
# Usage: build-images.sh BUILD_DIR [TARGET...]   (targets: operator sidecar libdist demo; default
# all; `base` makes only the base image)
#
# The base image is debian:bookworm from a registry when one answers, else made here with
# `debootstrap --variant=minbase bookworm` and imported as localhost/debian:bookworm.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:?usage: build-images.sh BUILD_DIR [TARGET...]}" && pwd)
shift
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(operator sidecar libdist demo)
for t in "${targets[@]}"; do
  case "$t" in operator | sidecar | libdist | demo | base) ;; *)
    echo "build-images: unknown target '$t'; the targets are operator, sidecar, libdist, demo (or base)" >&2
    exit 2 ;;
  esac
done

say() { echo "images: $*"; }
die() { echo "images: $*" >&2; exit 1; }

command -v podman >/dev/null || die "podman is not installed: run 'make deps' (or apt-get install podman runc)"
export CONTAINERS_CONF="$src/images/containers.conf"
podman info >/dev/null 2>&1 || die "podman cannot run here: $(podman info 2>&1 | tail -1)"

mkdir -p "$build/images"
# The release version: the project's (CMakeLists.txt), which is also the chart's appVersion.
version=$(sed -n 's/^project(cohort VERSION \([0-9.]*\).*/\1/p' "$src/CMakeLists.txt")
[ -n "$version" ] || die "cannot read the project version from $src/CMakeLists.txt"

# 1. The base image.
base=localhost/debian:bookworm
if ! podman image exists "$base"; then
  if timeout 30 podman pull -q docker.io/library/debian:bookworm >/dev/null 2>&1; then
    podman tag docker.io/library/debian:bookworm "$base"
  else
    command -v debootstrap >/dev/null || die "no registry answers and debootstrap is missing: run 'make deps'"
    [ "$(id -u)" -eq 0 ] || die "no registry answers, and debootstrap needs root to make the base image"
    rootfs="$build/images/rootfs"
    say "no registry answers: making $base with debootstrap (about 30 s)"
    rm -rf "$rootfs"
    debootstrap --variant=minbase bookworm "$rootfs" http://deb.debian.org/debian >"$build/images/debootstrap.log" 2>&1 ||
      die "debootstrap failed; see $build/images/debootstrap.log"
    # What debootstrap downloaded, and the documentation a container never reads (as slim does).
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* \
      "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/*
    tar -C "$rootfs" -c . | podman import -q - "$base" >/dev/null
    rm -rf "$rootfs"
  fi
fi

[ "${targets[*]}" != base ] || exit 0

# 2. The binaries, as `make install` lays them out (stripped), plus demo-trainer.
stage="$build/images/stage"
rm -rf "$stage"
mkdir -p "$stage"
cmake --install "$build" --prefix "$stage/opt/cohort" --strip >"$build/images/install.log" ||
  die "cmake --install failed; see $build/images/install.log (did 'make build' run?)"
install -m 755 -s "$build/bin/demo-trainer" "$stage/opt/cohort/bin/"
printf 'FROM scratch\nCOPY opt/ /opt/\n' | podman build -q -f - -t localhost/cohort-binaries:dev "$stage" >/dev/null

# 3. Each target from the Dockerfile, over those binaries.
for t in "${targets[@]}"; do
  say "building localhost/cohort-$t:dev"
  podman build -q --network host \
    --build-arg BASE_IMAGE="$base" --build-arg RUNTIME_BASE_IMAGE="$base" \
    --build-arg BINARIES_IMAGE=localhost/cohort-binaries:dev \
    --target "$t" -t "localhost/cohort-$t:dev" "$src" >/dev/null
  podman tag "localhost/cohort-$t:dev" "ghcr.io/cohort-dev/cohort-$t:$version"
done
podman images --filter reference='localhost/cohort-*:dev' --format '{{.Repository}}:{{.Tag}}  {{.Size}}'
