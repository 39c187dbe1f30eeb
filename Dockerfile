# Builds Cohort's images from the same install script that `make deps` and CI use.
#   docker build --target sidecar  -t ghcr.io/cohort-dev/cohort-sidecar:0.1.0 .
#   docker build --target operator -t ghcr.io/cohort-dev/cohort-operator:0.1.0 .
#   docker build --target libdist  -t ghcr.io/cohort-dev/cohort-libdist:0.1.0 .
FROM debian:bookworm AS build
WORKDIR /src
COPY scripts/install-deps.sh scripts/install-deps.sh
RUN bash scripts/install-deps.sh
COPY . .
# The images need the gcc build only; the clang sub-build (thread-safety check, fuzzers) is CI's.
RUN make build CMAKE_FLAGS=-DCOHORT_CLANG_SUBBUILD=OFF && make install PREFIX=/opt/cohort

FROM debian:bookworm-slim AS runtime
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends \
      ca-certificates libgrpc++1.51 libprotobuf32 libcpp-httplib0.11 libprometheus-cpp-core1.0 \
      libyaml-cpp0.7 libssl3 \
    && rm -rf /var/lib/apt/lists/*
USER 65532:65532

# The operator (manifests/operator/deployment.yaml).
FROM runtime AS operator
COPY --from=build /opt/cohort/bin/cohort-operator /usr/local/bin/
ENTRYPOINT ["/usr/local/bin/cohort-operator"]

# The base of a C++ trainer's image: libdist installed under /usr/local (dist/distributed.h,
# libcohort_dist.so, find_package(Cohort) and pkg-config cohort-dist) with a compiler, CMake and
# the headers libdist's API uses. A trainer's Dockerfile:
#   FROM ghcr.io/cohort-dev/cohort-libdist:0.1.0
#   COPY . /src
#   RUN cmake -S /src -B /build && cmake --build /build
# See examples/out-of-tree and docs/libdist.md.
FROM debian:bookworm AS libdist
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends \
      ca-certificates g++ cmake ninja-build make pkg-config libabsl-dev libgrpc++1.51 libprotobuf32 \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /opt/cohort/include/ /usr/local/include/
COPY --from=build /opt/cohort/lib/ /usr/local/lib/
COPY --from=build /opt/cohort/bin/cohort-run /opt/cohort/bin/cohort-sidecar /usr/local/bin/
RUN ldconfig

# The sidecar every job pod runs, with the local launcher and the static in-pod launcher that
# the init container cohort-launch-install copies into pods running several processes (the
# default target).
FROM runtime AS sidecar
COPY --from=build /opt/cohort/bin/cohort-sidecar /opt/cohort/bin/cohort-run \
     /opt/cohort/bin/cohort-launch /usr/local/bin/
ENTRYPOINT ["/usr/local/bin/cohort-sidecar"]
