# Builds Cohort's binaries from the same install script that `make deps` and CI use.
FROM debian:bookworm AS build
WORKDIR /src
COPY scripts/install-deps.sh scripts/install-deps.sh
RUN bash scripts/install-deps.sh
COPY . .
RUN make build

FROM debian:bookworm-slim
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends \
      libgrpc++1.51 libprotobuf32 libcpp-httplib0.11 libprometheus-cpp-core1.0 \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/build/bin/cohort-sidecar /src/build/bin/cohort-run /usr/local/bin/
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/cohort-sidecar"]
