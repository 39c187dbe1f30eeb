# Builds Cohort's images from the same install script that `make deps` and CI use.
#   docker build --target sidecar  -t ghcr.io/cohort-dev/cohort-sidecar:0.1.0 .
#   docker build --target operator -t ghcr.io/cohort-dev/cohort-operator:0.1.0 .
FROM debian:bookworm AS build
WORKDIR /src
COPY scripts/install-deps.sh scripts/install-deps.sh
RUN bash scripts/install-deps.sh
COPY . .
RUN make build

FROM debian:bookworm-slim AS runtime
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends \
      ca-certificates libgrpc++1.51 libprotobuf32 libcpp-httplib0.11 libprometheus-cpp-core1.0 \
      libyaml-cpp0.7 libssl3 \
    && rm -rf /var/lib/apt/lists/*
USER 65532:65532

# The operator (manifests/operator/deployment.yaml).
FROM runtime AS operator
COPY --from=build /src/build/bin/cohort-operator /usr/local/bin/
ENTRYPOINT ["/usr/local/bin/cohort-operator"]

# The sidecar every job pod runs, with the local launcher (the default target).
FROM runtime AS sidecar
COPY --from=build /src/build/bin/cohort-sidecar /src/build/bin/cohort-run /usr/local/bin/
ENTRYPOINT ["/usr/local/bin/cohort-sidecar"]
