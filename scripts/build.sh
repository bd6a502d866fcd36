#!/usr/bin/env bash
# Configures and builds tetra into build/ (build/tetra). CUDA is compiled where nvcc exists
# (/usr/local/cuda or on PATH) for sm_90 unless CMAKE_CUDA_ARCHITECTURES says otherwise.
# Extra CMake arguments pass through: scripts/build.sh -DTETRA_CUDA=OFF
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
  cmake -S . -B "$BUILD_DIR" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_CUDA_ARCHITECTURES="${CMAKE_CUDA_ARCHITECTURES:-90}" "$@"
elif [ $# -gt 0 ]; then
  cmake -S . -B "$BUILD_DIR" "$@"
fi
cmake --build "$BUILD_DIR" -j "${JOBS:-$(nproc)}"
