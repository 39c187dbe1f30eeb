# The user interface of the project. `make test` and `make demo` install missing dependencies
# and build first.
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
PREFIX ?= /usr/local
# `make fuzz`: seconds per fuzz target, how many run at once, and which (default: all).
FUZZ_SECONDS ?= 600
FUZZ_PARALLEL ?= 1
FUZZ_TARGETS ?=
# `make demo`: how the local control plane runs the demo's pods: process (local processes, the
# default) or podman (containers of `make images`' images, the operator installed with Helm).
RUNTIME ?= process

.PHONY: all deps build test demo bench install python images fuzz clean

all: build

deps:
	@bash scripts/install-deps.sh

$(BUILD_DIR)/build.ninja:
	cmake -S . -B $(BUILD_DIR) -G Ninja $(CMAKE_FLAGS)

# Everything, the clang sub-build (thread-safety check, fuzz targets) included.
build: $(BUILD_DIR)/build.ninja
	cmake --build $(BUILD_DIR) -j $(JOBS) --target all clang-subbuild

# Builds everything but the clang sub-build, then scripts/run-tests.sh builds that at idle
# priority while the first tests run (most of them wait on clocks and sockets more than they
# compute) and runs the tests that need it last; it prints how long it all took and the ten slowest
# tests. CTEST_ARGS passes more to ctest (`make test CTEST_ARGS="-L unit"`); then the sub-build
# comes first and one ctest runs.
CTEST_ARGS ?=
test:
	@start=$$(date +%s) && $(MAKE) --no-print-directory deps $(BUILD_DIR)/build.ninja && \
	  cmake --build $(BUILD_DIR) -j $(JOBS) --target all && \
	  bash scripts/run-tests.sh $(BUILD_DIR) $(JOBS) $$start $$(date +%s) $(CTEST_ARGS)

# Builds only what the demo runs (the `demo-binaries` target: no tests, benchmarks, fuzzers or
# clang sub-build), so that a fresh machine reaches the demo in minutes (README, "Quick start").
demo: deps $(BUILD_DIR)/build.ninja
	@echo "demo: building what the demo runs (the first time about 7 minutes on 2 cores; then seconds)"
	cmake --build $(BUILD_DIR) -j $(JOBS) --target demo-binaries
	@if [ "$(RUNTIME)" = podman ]; then bash scripts/build-images.sh $(BUILD_DIR); fi
	@RUNTIME=$(RUNTIME) bash examples/run-demo.sh $(BUILD_DIR)

# libdist (headers, library, CMake package, pkg-config file) and the binaries under PREFIX.
install: build
	cmake --install $(BUILD_DIR) --prefix $(PREFIX)

# The cohort Python package (python/) as a wheel in $(BUILD_DIR)/python-dist/ (docs/python.md).
python: deps build
	@bash scripts/build-python-wheel.sh $(BUILD_DIR)

# Cohort's images (operator, sidecar, libdist, demo) from the binaries of `make build`, with
# podman, tagged localhost/cohort-<name>:dev and ghcr.io/cohort-dev/cohort-<name>:<version>
# (docs/images.md).
images: deps build
	@bash scripts/build-images.sh $(BUILD_DIR)

bench: deps build
	@bash bench/run-benchmarks.sh $(BUILD_DIR)

# Each fuzz target (tests/fuzz/) for FUZZ_SECONDS, corpus kept in $(BUILD_DIR)/fuzz/; prints a table
# of executions and findings, and copies findings into tests/fuzz/regressions/. Needs clang.
fuzz: deps build
	@bash tests/fuzz/run_long.sh $(BUILD_DIR) $(FUZZ_SECONDS) $(FUZZ_PARALLEL) $(FUZZ_TARGETS)

clean:
	rm -rf $(BUILD_DIR)
