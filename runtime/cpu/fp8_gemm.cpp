// CPU FP8 GEMM (runtime/ops.h): the recipes' emulation. Both operands are dequantised to fp32 exactly
// as fp8_dequantize does (code value × its group's scale, rounded to fp32), then one fp32 GEMM:
//   y[M, N] (+)= a[M, K] · b[N, K]ᵀ,
// and the epilogue as the unfused ops compute it, in this order: the residual copied into y and the
// product accumulated onto it, the bias (add_bias), GELU (gelu_forward from the pre-activation, or
// gelu_backward), the amax (fp8_amax): the fused call and the sequence of ops agree bit for bit.
// The dequantised copies are temporaries (M·K + N·K floats); the CPU backend is the reference and the
// test bed, not where FP8 saves time.
#include <cblas.h>

#include <algorithm>

#include "runtime/cpu/cpu_ops.h"
#include "runtime/cpu/kernel_util.h"
#include "runtime/fp8_cast_shape.h"

namespace tetra::cpu {

void fp8_gemm(Tensor& y, const Tensor& a, const Tensor& a_scale, ops::Fp8Scaling a_scaling, const Tensor& b,
              const Tensor& b_scale, ops::Fp8Scaling b_scaling, bool accumulate, bool /*fast_accum: fp32 here*/,
              const ops::Fp8Epilogue& e) {
  const char* op = "fp8_gemm";
  const Fp8GemmShape s = fp8_gemm_shape(op, y, a, a_scale, a_scaling, b, b_scale, b_scaling);
  check_dtype(op, "y", y, DType::F32);
  // z: where the product (plus the residual) lands; the pre-activation under a GELU forward.
  Tensor& z = e.gelu_pre ? *e.gelu_pre : y;
  if (e.residual && e.residual->data_ptr() != y.data_ptr()) std::copy_n(e.residual->data<float>(), y.numel(), y.data<float>());
  const bool onto = accumulate || e.residual;
  if (s.m > 0 && s.n > 0 && s.k == 0 && !onto) std::fill_n(z.data<float>(), z.numel(), 0.0f);
  if (s.m > 0 && s.n > 0 && s.k > 0) {
    Tensor da = Tensor::empty(a.shape(), DType::F32), db = Tensor::empty(b.shape(), DType::F32);
    cpu::fp8_dequantize(da, a, a_scale, a_scaling);
    cpu::fp8_dequantize(db, b, b_scale, b_scaling);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(s.m), static_cast<int>(s.n),
                static_cast<int>(s.k), 1.0f, da.data<float>(), static_cast<int>(s.k), db.data<float>(),
                static_cast<int>(s.k), onto ? 1.0f : 0.0f, z.data<float>(), static_cast<int>(s.n));
  }
  if (e.bias) cpu::add_bias(z, *e.bias);
  if (e.gelu_pre) cpu::gelu_forward(y, z, nullptr);
  if (e.dgelu_pre) cpu::gelu_backward(y, y, *e.dgelu_pre, nullptr);
  if (e.amax) cpu::fp8_amax(*e.amax, y);
}

}  // namespace tetra::cpu
