// CPU SwiGLU on a fused gate/up projection gu[N, 2F] = [gate | up] (runtime/ops.h):
//   forward   h = silu(g)·u,  silu(g) = g·σ(g),  σ(g) = 1/(1 + e^−g)
//   backward  dg = dh·u·σ(g)·(1 + g·(1 − σ(g))),  du = dh·silu(g)
// Shapes: gate_up, d_gate_up [..., 2F]; h, dh [..., F] (the same leading dimensions). fp32.
#include <cmath>

#include "runtime/cpu/cpu_ops.h"
#include "runtime/cpu/kernel_util.h"

namespace tetra::cpu {

namespace {

// gate_up [..., 2F] fp32; returns F.
int64_t check_gate_up(const char* op, const Tensor& gate_up) {
  check_dtype(op, "gate_up", gate_up, DType::F32);
  if (gate_up.ndim() < 1 || gate_up.dim(-1) % 2 != 0)
    TETRA_FAIL(Internal, op, ": gate_up must be [..., 2F] (gate | up), got ", gate_up.describe());
  return gate_up.dim(-1) / 2;
}

float sigmoid(float g) { return 1.0f / (1.0f + std::exp(-g)); }

}  // namespace

void swiglu_forward(Tensor& h, const Tensor& gate_up, Tensor* amax, Tensor* row_amax) {
  const char* op = "swiglu_forward";
  const int64_t F = check_gate_up(op, gate_up);
  check_dtype(op, "h", h, DType::F32);
  check_shape(op, "h", h, with_last(leading_shape(gate_up), F));
  check_disjoint(op, "gate_up", h, gate_up);
  const int64_t N = rows_of(gate_up);
  const float* pgu = gate_up.data<float>();
  float* ph = h.data<float>();
  for (int64_t n = 0; n < N; ++n) {
    const float* g = pgu + n * 2 * F;
    const float* u = g + F;
    float* hr = ph + n * F;
    for (int64_t f = 0; f < F; ++f) hr[f] = g[f] * sigmoid(g[f]) * u[f];
  }
  if (amax) fp8_amax(*amax, h);  // ops.h's amax output: the cast's own measure of h
  if (row_amax) fp8_row_amax(*row_amax, h);
}

void swiglu_backward(Tensor& d_gate_up, const Tensor& dh, const Tensor& gate_up, Tensor* amax, Tensor* row_amax) {
  const char* op = "swiglu_backward";
  const int64_t F = check_gate_up(op, gate_up);
  check_dtype(op, "dh", dh, DType::F32);
  check_shape(op, "dh", dh, with_last(leading_shape(gate_up), F));
  check_dtype(op, "d_gate_up", d_gate_up, DType::F32);
  check_shape(op, "d_gate_up", d_gate_up, gate_up.shape());
  check_disjoint(op, "gate_up", d_gate_up, gate_up);
  check_disjoint(op, "dh", d_gate_up, dh);
  const int64_t N = rows_of(gate_up);
  const float* pgu = gate_up.data<float>();
  const float* pdh = dh.data<float>();
  float* pd = d_gate_up.data<float>();
  for (int64_t n = 0; n < N; ++n) {
    const float* g = pgu + n * 2 * F;
    const float* u = g + F;
    const float* d = pdh + n * F;
    float* dg = pd + n * 2 * F;
    float* du = dg + F;
    for (int64_t f = 0; f < F; ++f) {
      const float s = sigmoid(g[f]);
      dg[f] = d[f] * u[f] * s * (1.0f + g[f] * (1.0f - s));
      du[f] = d[f] * g[f] * s;
    }
  }
  if (amax) fp8_amax(*amax, d_gate_up);
  if (row_amax) fp8_row_amax(*row_amax, d_gate_up);
}

}  // namespace tetra::cpu
