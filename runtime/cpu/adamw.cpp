// CPU AdamW, the update of torch.optim.AdamW (decoupled weight decay), one element at a time:
//   g = grad·grad_scale
//   p ← p·(1 - lr·wd)
//   m ← β1·m + (1-β1)·g,   v ← β2·v + (1-β2)·g²
//   p ← p - lr/(1-β1^step) · m / (√v/√(1-β2^step) + eps)
// master, m, v fp32; grad fp32 or bf16; working (optional) fp32 or bf16 receives the new p. All one shape.
#include <cmath>

#include "runtime/adamw_scalars.h"
#include "runtime/cpu/cpu_ops.h"
#include "runtime/cpu/kernel_util.h"

namespace tetra::cpu {

void adamw_update(Tensor& master, const Tensor& grad, Tensor& m, Tensor& v, const AdamWHyper& h,
                  Tensor* working) {
  const char* op = "adamw_update";
  check_dtype(op, "master", master, DType::F32);
  check_float(op, "grad", grad);
  check_shape(op, "grad", grad, master.shape());
  check_dtype(op, "m", m, DType::F32);
  check_shape(op, "m", m, master.shape());
  check_dtype(op, "v", v, DType::F32);
  check_shape(op, "v", v, master.shape());
  const bool write_working = given(working);
  if (write_working) {
    check_float(op, "working", *working);
    check_shape(op, "working", *working, master.shape());
  }
  if (h.step < 1) TETRA_FAIL(Internal, op, ": step must be ≥ 1 (1-based, for bias correction), got ", h.step);
  if (!(h.beta1 >= 0.0f && h.beta1 < 1.0f) || !(h.beta2 >= 0.0f && h.beta2 < 1.0f))
    TETRA_FAIL(Internal, op, ": betas must lie in [0, 1), got (", h.beta1, ", ", h.beta2, ")");

  const AdamWScalars s = adamw_scalars(h.lr, h.beta1, h.beta2, static_cast<double>(h.step));
  const float step_size = s.step_size, inv_bc2_sqrt = s.inv_bc2_sqrt;
  const float decay = static_cast<float>(1.0 - static_cast<double>(h.lr) * h.weight_decay);
  const float b1 = h.beta1, b2 = h.beta2, c1 = 1.0f - h.beta1, c2 = 1.0f - h.beta2;

  const int64_t n = master.numel();
  float* pp = master.data<float>();
  float* pm = m.data<float>();
  float* pv = v.data<float>();
  FloatReader g_in(grad);
  for (int64_t i = 0; i < n; ++i) {
    const float g = g_in[i] * h.grad_scale;
    const float p = pp[i] * decay;
    const float mi = b1 * pm[i] + c1 * g;
    const float vi = b2 * pv[i] + c2 * g * g;
    const float denom = std::sqrt(vi) * inv_bc2_sqrt + h.eps;
    pp[i] = p - step_size * mi / denom;
    pm[i] = mi;
    pv[i] = vi;
  }
  if (write_working) {
    FloatWriter w(*working);
    for (int64_t i = 0; i < n; ++i) w.set(i, pp[i]);
  }
}

}  // namespace tetra::cpu
