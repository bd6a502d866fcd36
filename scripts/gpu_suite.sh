#!/usr/bin/env bash
# On a machine with NVIDIA GPUs: build with CUDA, run the GPU tests (ctest label gpu), then the
# throughput benchmarks beside the PyTorch peer. Logs and JSON go to OUT_DIR (default runs/gpu).
#   scripts/gpu_suite.sh [OUT_DIR] [tests|bench|all]
#   PEER=path/to/torch_gpt.py scripts/gpu_suite.sh out all
# Exits non-zero when the build fails, when any GPU test fails (a skipped test is listed, not a
# failure), or when the benchmark fails.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-runs/gpu}
what=${2:-all}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
py=$(command -v python3)
t0=$(date +%s)
if [ ! -x build/tetra ]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DTETRA_CUDA=ON \
        -DTETRA_PYTHON="$py" > "$out/configure.log" 2>&1 || { tail -40 "$out/configure.log"; exit 1; }
fi
cmake --build build -j "$(nproc)" > "$out/build.log" 2>&1 || { grep -E "error|Error" "$out/build.log" | head -40; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm --format=csv,noheader
status=0
if [ "$what" = tests ] || [ "$what" = all ]; then
  ctest --test-dir build -L gpu --output-on-failure -j 1 --timeout 600 > "$out/gpu_tests.log" 2>&1
  rc=$?
  echo "gpu tests: rc $rc ($(grep -E 'tests passed|tests failed' "$out/gpu_tests.log"))"
  grep -E "^\s*[0-9]+/[0-9]+ Test.*(Failed|\*\*\*|Skipped)" "$out/gpu_tests.log" | head -40
  [ "$rc" -eq 0 ] || status=1
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
  BENCH_DIR="$out/bench" scripts/bench/gpt_throughput.sh 124m 40 | tee "$out/bench_124m.jsonl"
  [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "benchmark failed"; status=1; }
fi
echo "total: $(( $(date +%s) - t0 )) s"
exit $status
