// CPU GELU, tanh approximation, written as PyTorch's gelu(approximate='tanh') computes it:
//   y  = 0.5·x·(1 + tanh(u)),  u = √(2/π)·(x + 0.044715·x³)
//   y' = 0.5·(1 + tanh(u)) + 0.5·x·(1 - tanh²(u))·√(2/π)·(1 + 3·0.044715·x²)
// Shapes: any, y/dx/dy/x all alike. Elementwise, so y may alias x and dx may alias dy. amax (optional):
// fp8_amax of the output, after it is written.
#include <cmath>

#include "runtime/cpu/cpu_ops.h"

namespace tetra::cpu {

namespace {
constexpr float kBeta = 0.7978845608028654f;  // √(2/π)
constexpr float kKappa = 0.044715f;
}  // namespace

void gelu_forward(Tensor& y, const Tensor& x, Tensor* amax) {
  check_dtype("gelu_forward", "x", x, DType::F32);
  check_dtype("gelu_forward", "y", y, DType::F32);
  check_shape("gelu_forward", "y", y, x.shape());
  const float* px = x.data<float>();
  float* py = y.data<float>();
  const int64_t n = x.numel();
  for (int64_t i = 0; i < n; ++i) {
    const float v = px[i];
    const float u = kBeta * (v + kKappa * v * v * v);
    py[i] = 0.5f * v * (1.0f + std::tanh(u));
  }
  if (amax) fp8_amax(*amax, y);  // ops.h's amax output: the cast's own measure of y
}

void gelu_backward(Tensor& dx, const Tensor& dy, const Tensor& x, Tensor* amax) {
  check_dtype("gelu_backward", "x", x, DType::F32);
  check_dtype("gelu_backward", "dy", dy, DType::F32);
  check_dtype("gelu_backward", "dx", dx, DType::F32);
  check_shape("gelu_backward", "dy", dy, x.shape());
  check_shape("gelu_backward", "dx", dx, x.shape());
  const float* px = x.data<float>();
  const float* pdy = dy.data<float>();
  float* pdx = dx.data<float>();
  const int64_t n = x.numel();
  for (int64_t i = 0; i < n; ++i) {
    const float v = px[i];
    const float v2 = v * v;
    const float t = std::tanh(kBeta * (v + kKappa * v2 * v));
    const float left_derivative = 0.5f * (1.0f + t);
    const float right_derivative = 0.5f * v * (1.0f - t * t) * kBeta * (1.0f + 3.0f * kKappa * v2);
    pdx[i] = pdy[i] * (left_derivative + right_derivative);
  }
  if (amax) fp8_amax(*amax, dx);
}

}  // namespace tetra::cpu
