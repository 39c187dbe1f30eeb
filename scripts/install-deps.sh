#!/usr/bin/env bash
# Installs the Debian (bookworm) packages Cohort builds and tests with, if any is missing.
# The single source of truth for the build environment: used by `make deps`, CI and the
# Dockerfile. COHORT_NO_CONTAINER_TOOLS=1 leaves out podman and debootstrap.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config git ca-certificates
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev
  nlohmann-json3-dev libcpp-httplib-dev prometheus-cpp-dev libyaml-cpp-dev libcli11-dev
  libssl-dev libgtest-dev libgmock-dev libbenchmark-dev
  prometheus python3
  # `make demo` reads the sidecars' and the operator's /metrics for its summary.
  curl
  # The clang sub-build: thread-safety analysis and the libFuzzer targets (cmake/ClangSubbuild.cmake).
  clang libclang-rt-14-dev
  # The format check (tests/check_format.sh).
  clang-format
)
# `make images` and the `containers` tests: podman with runc, and debootstrap for the base image
# where no registry answers (docs/images.md). Not inside an image build (COHORT_NO_CONTAINER_TOOLS=1).
if [ "${COHORT_NO_CONTAINER_TOOLS:-0}" != 1 ]; then
  PACKAGES+=(podman runc containernetworking-plugins fuse-overlayfs catatonit debootstrap)
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if [[ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" != "install ok installed" ]]; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "cohort: installing missing packages: ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO="sudo"
  else
    echo "cohort: not root and no sudo; install these packages by hand: ${missing[*]}" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
