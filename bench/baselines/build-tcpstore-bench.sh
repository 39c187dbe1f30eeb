#!/usr/bin/env bash
# Builds bench/baselines/tcpstore_bench.cc (PyTorch's TCPStore driven by its C++ client) against
# the torch wheel's headers and libtorch_cpu, into BUILD_DIR/bench-peers/tcpstore-bench. The wheel
# comes from PyPI into BUILD_DIR/python/torch-2.15.0 (the environment the PyTorch tests use).
# Usage: bench/baselines/build-tcpstore-bench.sh [BUILD_DIR]   (default: build)
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
src=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
venv="$build/python/torch-2.15.0"
bash "$src/../../tests/setup_python_venv.sh" "$venv" torch.distributed torch==2.15.0 numpy==2.4.6
torch=$("$venv/bin/python" -c 'import os, torch; print(os.path.dirname(torch.__file__))')
mkdir -p "$build/bench-peers"
# The wheel's headers need C++20; its libraries use the C++11 ABI, as g++ does by default.
g++ -std=c++20 -O2 -o "$build/bench-peers/tcpstore-bench" "$src/tcpstore_bench.cc" \
  -I"$torch/include" -I"$torch/include/torch/csrc/api/include" \
  -L"$torch/lib" -ltorch_cpu -lc10 -Wl,-rpath,"$torch/lib" -pthread
echo "built $build/bench-peers/tcpstore-bench"
