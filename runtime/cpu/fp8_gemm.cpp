// CPU FP8 GEMM (runtime/ops.h): the recipes' emulation. Both operands are dequantised to fp32 exactly
// as fp8_dequantize does (code value × its group's scale, rounded to fp32), then one fp32 GEMM:
//   y[M, N] (+)= a[M, K] · b[N, K]ᵀ.
// The dequantised copies are temporaries (M·K + N·K floats); the CPU backend is the reference and the
// test bed, not where FP8 saves time.
#include <cblas.h>

#include <algorithm>

#include "runtime/cpu/cpu_ops.h"
#include "runtime/cpu/kernel_util.h"
#include "runtime/fp8_cast_shape.h"

namespace tetra::cpu {

void fp8_gemm(Tensor& y, const Tensor& a, const Tensor& a_scale, ops::Fp8Scaling a_scaling, const Tensor& b,
              const Tensor& b_scale, ops::Fp8Scaling b_scaling, bool accumulate, bool /*fast_accum: fp32 here*/) {
  const char* op = "fp8_gemm";
  const Fp8GemmShape s = fp8_gemm_shape(op, y, a, a_scale, a_scaling, b, b_scale, b_scaling);
  check_dtype(op, "y", y, DType::F32);
  if (s.m == 0 || s.n == 0) return;
  if (s.k == 0) {
    if (!accumulate) std::fill_n(y.data<float>(), y.numel(), 0.0f);
    return;
  }
  Tensor da = Tensor::empty(a.shape(), DType::F32), db = Tensor::empty(b.shape(), DType::F32);
  cpu::fp8_dequantize(da, a, a_scale, a_scaling);
  cpu::fp8_dequantize(db, b, b_scale, b_scaling);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(s.m), static_cast<int>(s.n),
              static_cast<int>(s.k), 1.0f, da.data<float>(), static_cast<int>(s.k), db.data<float>(),
              static_cast<int>(s.k), accumulate ? 1.0f : 0.0f, y.data<float>(), static_cast<int>(s.n));
}

}  // namespace tetra::cpu
