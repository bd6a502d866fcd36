// CPU partial sum (runtime/ops.h sum_partials): out[M, C] = Σ_s parts[s] + b + residual, every
// element summed in fp32 in the order s = 0 … S−1, then b, then the residual, and rounded once to
// out's dtype; the CUDA kernel does the same additions in the same order, so both give the same
// bits for the same inputs.
#include "runtime/cpu/cpu_ops.h"
#include "runtime/cpu/kernel_util.h"

namespace tetra::cpu {

void sum_partials(Tensor& out, const Tensor& parts, const Tensor& b, const Tensor* residual) {
  const char* op = "sum_partials";
  check_float(op, "out", out);
  check_float(op, "parts", parts);
  check_dtype(op, "parts", parts, out.dtype());
  if (out.ndim() != 2 || parts.ndim() != 3 || parts.dim(1) != out.dim(0) || parts.dim(2) != out.dim(1))
    TETRA_FAIL(Internal, op, ": parts must be [S, M, C] and out [M, C], got ", parts.describe(), " and ",
               out.describe());
  const int64_t S = parts.dim(0), M = out.dim(0), C = out.dim(1);
  if (b.defined()) {
    check_float(op, "b", b);
    check_shape(op, "b", b, {C});
  }
  const bool with_res = given(residual);
  if (with_res) {
    check_dtype(op, "residual", *residual, out.dtype());
    check_shape(op, "residual", *residual, out.shape());
    check_same_or_disjoint(op, "residual", out, *residual);
  }
  check_disjoint(op, "parts", out, parts);
  const int64_t n = M * C;
  const FloatReader p(parts), bias(b.defined() ? b : out), res(with_res ? *residual : out);
  const FloatWriter w(out);
  for (int64_t i = 0; i < n; ++i) {
    float acc = S > 0 ? p[i] : 0.0f;
    for (int64_t s = 1; s < S; ++s) acc += p[s * n + i];
    if (b.defined()) acc += bias[i % C];
    if (with_res) acc += res[i];
    w.set(i, acc);
  }
}

}  // namespace tetra::cpu
