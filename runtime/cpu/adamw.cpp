// CPU AdamW, the update of torch.optim.AdamW (decoupled weight decay), one element at a time:
//   g = grad·grad_scale
//   p ← p·(1 - lr·wd)
//   m ← β1·m + (1-β1)·g,   v ← β2·v + (1-β2)·g²
//   p ← p - lr/(1-β1^step) · m / (√v/√(1-β2^step) + eps)
// master fp32; m, v both fp32 or both bf16 (read, updated in fp32, the new p computed from the fp32
// values, then each rounded to nearest even once as it is stored); grad fp32 or bf16; working
// (optional) fp32 or bf16 receives the new p. All one shape.
#include <cmath>

#include "runtime/adamw_scalars.h"
#include "runtime/cpu/cpu_ops.h"
#include "runtime/cpu/kernel_util.h"

namespace tetra::cpu {

namespace {

// A moment element as fp32 (MomentT float: fp32 storage; uint16_t: bf16 bits).
inline float load_moment(const float* p, int64_t i) { return p[i]; }
inline float load_moment(const uint16_t* p, int64_t i) { return bf16_to_float(p[i]); }
inline void store_moment(float* p, int64_t i, float x) { p[i] = x; }
inline void store_moment(uint16_t* p, int64_t i, float x) { p[i] = float_to_bf16(x); }

struct AdamWConstants {
  float step_size, inv_bc2_sqrt, decay, b1, b2, c1, c2, eps, grad_scale;
};

template <class MomentT>
void adamw_loop(float* pp, MomentT* pm, MomentT* pv, const FloatReader& g_in, int64_t n, const AdamWConstants& k) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = g_in[i] * k.grad_scale;
    const float p = pp[i] * k.decay;
    const float mi = k.b1 * load_moment(pm, i) + k.c1 * g;
    const float vi = k.b2 * load_moment(pv, i) + k.c2 * g * g;
    const float denom = std::sqrt(vi) * k.inv_bc2_sqrt + k.eps;
    pp[i] = p - k.step_size * mi / denom;
    store_moment(pm, i, mi);
    store_moment(pv, i, vi);
  }
}

}  // namespace

void adamw_update(Tensor& master, const Tensor& grad, Tensor& m, Tensor& v, const AdamWHyper& h,
                  Tensor* working) {
  const char* op = "adamw_update";
  check_dtype(op, "master", master, DType::F32);
  check_float(op, "grad", grad);
  check_shape(op, "grad", grad, master.shape());
  check_float(op, "m", m);
  check_shape(op, "m", m, master.shape());
  check_dtype(op, "v", v, m.dtype());
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
  AdamWConstants k;
  k.step_size = s.step_size;
  k.inv_bc2_sqrt = s.inv_bc2_sqrt;
  k.decay = static_cast<float>(1.0 - static_cast<double>(h.lr) * h.weight_decay);
  k.b1 = h.beta1;
  k.b2 = h.beta2;
  k.c1 = 1.0f - h.beta1;
  k.c2 = 1.0f - h.beta2;
  k.eps = h.eps;
  k.grad_scale = h.grad_scale;

  const int64_t n = master.numel();
  float* pp = master.data<float>();
  const FloatReader g_in(grad);
  if (m.dtype() == DType::BF16)
    adamw_loop(pp, m.bf16_bits(), v.bf16_bits(), g_in, n, k);
  else
    adamw_loop(pp, m.data<float>(), v.data<float>(), g_in, n, k);
  if (write_working) {
    FloatWriter w(*working);
    for (int64_t i = 0; i < n; ++i) w.set(i, pp[i]);
  }
}

}  // namespace tetra::cpu
