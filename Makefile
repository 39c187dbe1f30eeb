# The user interface of the project. `make test` and `make demo` install missing dependencies
# and build first.
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
PREFIX ?= /usr/local

.PHONY: all deps build test demo bench install clean

all: build

deps:
	@bash scripts/install-deps.sh

$(BUILD_DIR)/build.ninja:
	cmake -S . -B $(BUILD_DIR) -G Ninja $(CMAKE_FLAGS)

build: $(BUILD_DIR)/build.ninja
	cmake --build $(BUILD_DIR) -j $(JOBS)

test: deps build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) --timeout 600

demo: deps build
	@bash examples/run-demo.sh $(BUILD_DIR)

# libdist (headers, library, CMake package, pkg-config file) and the binaries under PREFIX.
install: build
	cmake --install $(BUILD_DIR) --prefix $(PREFIX)

bench: deps build
	@bash bench/run-benchmarks.sh $(BUILD_DIR)

clean:
	rm -rf $(BUILD_DIR)
