# Cohort's images (docs/images.md). Every image takes Cohort's binaries from one image holding
# /opt/cohort, BINARIES_IMAGE, filled one of two ways:
#
#  - `make images` (scripts/build-images.sh): the binaries `make build` made, packaged in
#    seconds, every target tagged localhost/cohort-<target>:dev;
#  - the release path, from source inside a container (about 10 minutes on 2 cores):
#      podman build --target build -t localhost/cohort-build:release .
#      podman build --build-arg BINARIES_IMAGE=localhost/cohort-build:release \
#        --target sidecar -t ghcr.io/cohort-dev/cohort-sidecar:0.1.0 .
#    (docker build takes the same arguments).
#
# Targets: operator, sidecar (the default), libdist (the base of a C++ trainer's image), demo
# (demo-trainer, the examples' image).
ARG BASE_IMAGE=debian:bookworm
ARG RUNTIME_BASE_IMAGE=debian:bookworm-slim
ARG BINARIES_IMAGE=localhost/cohort-binaries:dev

# The release path's build: the same install script `make deps` and CI use, then /opt/cohort.
FROM ${BASE_IMAGE} AS build
WORKDIR /src
COPY scripts/install-deps.sh scripts/install-deps.sh
# No container tools inside the image build. The clang sub-build (thread-safety check, fuzzers)
# is CI's.
RUN COHORT_NO_CONTAINER_TOOLS=1 bash scripts/install-deps.sh
COPY . .
RUN make build CMAKE_FLAGS=-DCOHORT_CLANG_SUBBUILD=OFF && cmake --install build --prefix /opt/cohort --strip \
    && install -m 755 -s build/bin/demo-trainer /opt/cohort/bin/

FROM ${BINARIES_IMAGE} AS binaries

# What Cohort's binaries load at run time, and a user of its own (the chart runs containers as
# uid 65532, non-root).
FROM ${RUNTIME_BASE_IMAGE} AS runtime
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends \
      ca-certificates libgrpc++1.51 libprotobuf32 libcpp-httplib0.11 libprometheus-cpp-core1.0 \
      libyaml-cpp0.7 libssl3 \
    && rm -rf /var/lib/apt/lists/*
USER 65532:65532

# The operator (charts/cohort, manifests/operator/deployment.yaml).
FROM runtime AS operator
COPY --from=binaries /opt/cohort/bin/cohort-operator /usr/local/bin/
ENTRYPOINT ["/usr/local/bin/cohort-operator"]

# The base of a C++ trainer's image: libdist installed under /usr/local (dist/distributed.h,
# libcohort_dist.so, find_package(Cohort) and pkg-config cohort-dist) with a compiler, CMake and
# the headers libdist's API uses, and cohort-run with its sidecar to run a job inside it. A
# trainer's Dockerfile (examples/out-of-tree, docs/libdist.md):
#   FROM ghcr.io/cohort-dev/cohort-libdist:0.1.0
#   COPY . /src
#   RUN cmake -S /src -B /build && cmake --build /build
FROM ${BASE_IMAGE} AS libdist
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends \
      ca-certificates g++ cmake ninja-build make pkg-config libabsl-dev libgrpc++1.51 libprotobuf32 \
      libcpp-httplib0.11 libprometheus-cpp-core1.0 libyaml-cpp0.7 libssl3 \
    && rm -rf /var/lib/apt/lists/*
COPY --from=binaries /opt/cohort/include/ /usr/local/include/
COPY --from=binaries /opt/cohort/lib/ /usr/local/lib/
COPY --from=binaries /opt/cohort/bin/cohort-run /opt/cohort/bin/cohort-sidecar /usr/local/bin/
RUN ldconfig

# The examples' image (manifests/examples/): demo-trainer with libdist, beside the sidecar image
# in each pod.
FROM runtime AS demo
USER 0:0
COPY --from=binaries /opt/cohort/lib/ /opt/cohort/lib/
COPY --from=binaries /opt/cohort/bin/demo-trainer /usr/local/bin/
RUN echo /opt/cohort/lib > /etc/ld.so.conf.d/cohort.conf && ldconfig
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/demo-trainer"]

# The sidecar every job pod runs, with the local launcher and the static in-pod launcher that
# the init container cohort-launch-install copies into pods running several processes (the
# default target).
FROM runtime AS sidecar
COPY --from=binaries /opt/cohort/bin/cohort-sidecar /opt/cohort/bin/cohort-run \
     /opt/cohort/bin/cohort-launch /usr/local/bin/
ENTRYPOINT ["/usr/local/bin/cohort-sidecar"]
