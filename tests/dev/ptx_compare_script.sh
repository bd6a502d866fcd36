#!/usr/bin/env bash
# scripts/dev/ptx_compare.py on small kernels: a refactor into an inlined helper and a renamed local
# is "same" (exit 0); instructions in another order "same opcodes" (exit 1); a changed operation "differs" with its opcode counts (exit 1); a kernel added;
# the --base REV form in a scratch git repository, with --tree across a renamed header; a missing
# file and a compile error (exit 2).
# Skips (77) where no CUDA compiler is installed.
# usage: ptx_compare_script.sh WORK_DIR
set -euo pipefail
src="$(cd "$(dirname "$0")/../.." && pwd)"
work=$1
py=${TETRA_PYTHON:-python3}
compare="$src/scripts/dev/ptx_compare.py"
fail() { echo "FAIL: $*" >&2; exit 1; }
nvcc=${CUDACXX:-/usr/local/cuda/bin/nvcc}
[ -x "$nvcc" ] || command -v nvcc > /dev/null || { echo "skip: no CUDA compiler"; exit 77; }
rm -rf "$work" && mkdir -p "$work"
cd "$work"

cat > before.cu <<'CU'
namespace {
__global__ void axpy(float* y, const float* x, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
}  // namespace
void launch(float* y, const float* x, float a, int n) { axpy<<<(n + 255) / 256, 256>>>(y, x, a, n); }
CU
cat > helper.cu <<'CU'
namespace {
__device__ __forceinline__ int global_index() { return blockIdx.x * blockDim.x + threadIdx.x; }
__global__ void axpy(float* y, const float* x, float a, int n) {
  const int index = global_index();
  if (index < n) y[index] = a * x[index] + y[index];
}
}  // namespace
void launch(float* y, const float* x, float a, int n) { axpy<<<(n + 255) / 256, 256>>>(y, x, a, n); }
CU
# The arithmetic in a helper taking the loaded values: nvcc then computes the two addresses before
# either load, the same instructions in another order.
cat > swapped.cu <<'CU'
namespace {
__device__ __forceinline__ float fused(float a, float x, float y) { return a * x + y; }
__global__ void axpy(float* y, const float* x, float a, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = fused(a, x[i], y[i]);
}
}  // namespace
void launch(float* y, const float* x, float a, int n) { axpy<<<(n + 255) / 256, 256>>>(y, x, a, n); }
CU
sed 's/a \* x\[i\] + y\[i\]/a * x[i] * y[i]/' before.cu > changed.cu
cat before.cu > added.cu
cat >> added.cu <<'CU'
__global__ void zero(float* y, int n) {
  if (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n) y[i] = 0.0f;
}
CU

# 1. The helper and the rename leave the PTX as it was.
"$py" "$compare" --before before.cu helper.cu > same.txt || fail "a pure refactor: exit $?"
"$py" - same.txt <<'PY' || fail "the lines of a pure refactor"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
kernel, summary = lines
assert "axpy" in kernel["kernel"] and kernel["verdict"] == "same", kernel
assert kernel["before"] == kernel["after"] and kernel["after"]["registers"] > 0, kernel
assert summary["unchanged"] is True and summary["kernels"] == 1 and summary["arch"] == "sm_90", summary
print("ok: a pure refactor is the same")
PY

# 2. Instructions in another order: the same opcodes, not the same code (exit 1).
rc=0; "$py" "$compare" --before before.cu swapped.cu > swapped.txt || rc=$?
[ "$rc" = 1 ] || fail "reordered instructions: exit $rc, not 1"
grep -q '"verdict": "same opcodes"' swapped.txt || fail "reordered instructions: $(cat swapped.txt)"

# 3. Two multiplies for the fused multiply-add: differs, naming the instructions.
rc=0; "$py" "$compare" --before before.cu changed.cu > changed.txt || rc=$?
[ "$rc" = 1 ] || fail "a changed operation: exit $rc, not 1"
"$py" - changed.txt <<'PY' || fail "the lines of a changed operation"
import json, sys
kernel, summary = [json.loads(l) for l in open(sys.argv[1])]
assert kernel["verdict"].startswith("differs"), kernel
assert kernel["opcode_changes"].get("fma.rn.f32") == -1 and kernel["opcode_changes"].get("mul.f32") == 2, kernel
assert summary["unchanged"] is False, summary
print("ok: a changed operation differs", kernel["opcode_changes"])
PY

# 4. A kernel in one version only.
rc=0; "$py" "$compare" --before before.cu added.cu > added.txt || rc=$?
[ "$rc" = 1 ] || fail "an added kernel: exit $rc, not 1"
grep -q '"verdict": "only after"' added.txt || fail "the added kernel is not reported: $(cat added.txt)"

# 5. --base REV: the committed version against the working file.
git init -q repo && cp before.cu repo/k.cu
git -C repo -c user.name=t -c user.email=t@t add k.cu
git -C repo -c user.name=t -c user.email=t@t commit -q -m k
cp helper.cu repo/k.cu
(cd repo && "$py" "$compare" k.cu > ../base.txt) || fail "--base HEAD on a pure refactor: exit $?"
tail -1 base.txt | grep -q '"unchanged": true' || fail "--base HEAD: $(cat base.txt)"
rc=0; (cd repo && "$py" "$compare" --base no-such-rev k.cu > /dev/null 2> ../badrev.err) || rc=$?
[ "$rc" = 2 ] && grep -q "git show no-such-rev" badrev.err || fail "an unknown revision: exit $rc, $(cat badrev.err)"

# 5b. --tree: a header renamed with its caller. Against today's headers the old file does not compile
# (exit 2); in the old revision's tree it does, and the device code is the same.
git init -q tree_repo
cat > tree_repo/h.cuh <<'CU'
__device__ __forceinline__ float axpy_value(float a, float x, float y) { return a * x + y; }
CU
cat > tree_repo/k.cu <<'CU'
#include "h.cuh"
namespace {
__global__ void axpy(float* y, const float* x, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = axpy_value(a, x[i], y[i]);
}
}  // namespace
void launch(float* y, const float* x, float a, int n) { axpy<<<(n + 255) / 256, 256>>>(y, x, a, n); }
CU
git -C tree_repo -c user.name=t -c user.email=t@t add h.cuh k.cu
git -C tree_repo -c user.name=t -c user.email=t@t commit -q -m k
sed -i 's/axpy_value/fused_axpy/' tree_repo/h.cuh tree_repo/k.cu
rc=0; (cd tree_repo && "$py" "$compare" k.cu > /dev/null 2> ../notree.err) || rc=$?
[ "$rc" = 2 ] || fail "a renamed header without --tree: exit $rc, not 2"
(cd tree_repo && "$py" "$compare" --tree k.cu > ../tree.txt) || fail "--tree on a renamed header: exit $?"
tail -1 tree.txt | grep -q '"unchanged": true' || fail "--tree: $(cat tree.txt)"
rc=0; "$py" "$compare" --tree --before before.cu helper.cu > /dev/null 2> tree_before.err || rc=$?
[ "$rc" = 2 ] && grep -q "goes with --base" tree_before.err || fail "--tree with --before: exit $rc"

# 6. Bad input: a missing file, a source that does not compile.
rc=0; "$py" "$compare" --before before.cu missing.cu > /dev/null 2> missing.err || rc=$?
[ "$rc" = 2 ] && grep -q "missing.cu: no such file" missing.err || fail "a missing file: exit $rc"
echo "this is not C++" > broken.cu
rc=0; "$py" "$compare" --before before.cu broken.cu > /dev/null 2> broken.err || rc=$?
[ "$rc" = 2 ] && grep -q "nvcc failed on broken.cu" broken.err || fail "a compile error: exit $rc, $(cat broken.err)"
echo "ok: ptx_compare"
