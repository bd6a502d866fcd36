#!/usr/bin/env bash
# On a machine with NVIDIA GPUs: build with CUDA, run the GPU tests (ctest label gpu), then the
# throughput benchmarks beside the PyTorch peer. Logs and JSON go to OUT_DIR (default runs/gpu).
#   scripts/gpu_suite.sh [OUT_DIR] [tests|bench|all]
#   PEER=path/to/torch_gpt.py scripts/gpu_suite.sh out all
#   TETRA_PYTHON=/path/to/python3 scripts/gpu_suite.sh     # the tests' Python (default: chosen by CMake)
#   GPU_TEST_JOBS=4 scripts/gpu_suite.sh out tests          # GPU tests four at a time on the GPU(s)
# Every skipped GPU test is listed with its reason (OUT_DIR/gpu_skipped.txt). Exits non-zero when the
# build fails, when any GPU test fails, when a test that one GPU can run was skipped (only tests
# labelled multi_gpu, which need 2 GPUs or more, may skip; so may those labelled nsys where the machine
# has no Nsight Systems), or when the benchmark fails.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
out=${1:-runs/gpu}
what=${2:-all}
mkdir -p "$out"
out=$(cd "$out" && pwd)  # absolute: ctest writes the JUnit file from the build folder
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
t0=$(date +%s)
# Configured every time: the tests' Python is chosen anew (tests/CMakeLists.txt: TETRA_PYTHON if
# given and it has numpy and h5py, else the python3 with the most of numpy, h5py, torch, torch+CUDA).
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DTETRA_CUDA=ON \
      -DTETRA_PYTHON="${TETRA_PYTHON:-}" > "$out/configure.log" 2>&1 || { tail -40 "$out/configure.log"; exit 1; }
grep -E "Tests' Python" "$out/configure.log"
cmake --build build -j "$(nproc)" > "$out/build.log" 2>&1 || { grep -E "error|Error" "$out/build.log" | head -40; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm --format=csv,noheader
status=0
if [ "$what" = tests ] || [ "$what" = all ]; then
  ctest --test-dir build -L gpu --output-on-failure -j "${GPU_TEST_JOBS:-1}" --timeout 900 --output-junit "$out/gpu_tests.xml" \
    > "$out/gpu_tests.log" 2>&1
  rc=$?
  echo "gpu tests: rc $rc ($(grep -E 'tests passed|tests failed' "$out/gpu_tests.log"))"
  grep -E "^\s*[0-9]+/[0-9]+ Test.*(Failed|\*\*\*)" "$out/gpu_tests.log" | head -40
  [ "$rc" -eq 0 ] || status=1
  # The tests that need 2 GPUs or more (label multi_gpu, or a gtest case that skips saying "needs 2
  # GPUs") may skip; any other skip is a failure.
  # Tests labelled nsys profile under Nsight Systems: they may skip where the machine has no nsys.
  ctest --test-dir build -N -L multi_gpu | sed -nE 's/^ *Test +#[0-9]+: +([^ ]+).*/\1/p' > "$out/multi_gpu_tests.txt"
  : > "$out/nsys_tests.txt"
  command -v nsys > /dev/null || [ -x /usr/local/cuda/bin/nsys ] ||
    ctest --test-dir build -N -L nsys | sed -nE 's/^ *Test +#[0-9]+: +([^ ]+).*/\1/p' > "$out/nsys_tests.txt"
  python3 - "$out/gpu_tests.xml" "$out/multi_gpu_tests.txt" "$out/gpu_skipped.txt" "$(nvidia-smi -L | grep -c ^GPU)" \
    "$out/nsys_tests.txt" <<'PY' || status=1
import sys, xml.etree.ElementTree as ET
junit, multi_file, listing, gpus, nsys_file = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
multi = set(open(multi_file).read().split())
no_nsys = set(open(nsys_file).read().split())
lines, bad = [], []
for case in ET.parse(junit).getroot().iter("testcase"):
    if case.find("skipped") is None and case.get("status") not in ("notrun", "disabled"):
        continue
    name = case.get("name")
    text = "".join(case.findtext(tag) or "" for tag in ("system-out", "system-err"))
    said = [l.strip() for l in text.splitlines() if "skip" in l.lower() and l.strip()]
    reason = said[-1] if said else (case.find("skipped").get("message", "") if case.find("skipped") is not None else "")
    # A gtest case inside a one-GPU executable cannot carry the label: it says so when it skips.
    why = "needs 2+ GPUs" if name in multi or "needs 2 GPUs" in text else "needs nsys" if name in no_nsys else None
    lines.append(f"{'skipped (' + why + ')' if why else 'SKIPPED, ONE GPU CAN RUN IT'}: {name}: {reason or 'no reason printed'}")
    if not why:
        bad.append(name)
open(listing, "w").write("\n".join(lines) + ("\n" if lines else ""))
print(f"skipped GPU tests ({len(lines)}, {gpus} GPU(s) visible):" if lines else "no GPU test skipped")
for l in lines:
    print("  " + l)
if bad:
    print(f"FAIL: {len(bad)} test(s) that one GPU can run were skipped: {' '.join(bad)}")
    sys.exit(1)
PY
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
  BENCH_DIR="$out/bench" scripts/bench/gpt_throughput.sh 124m 40 | tee "$out/bench_124m.jsonl"
  [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "benchmark failed"; status=1; }
fi
echo "total: $(( $(date +%s) - t0 )) s"
exit $status
