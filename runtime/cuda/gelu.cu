// CUDA GELU, tanh approximation, the formula of PyTorch's gelu(approximate='tanh'):
//   forward   y = 0.5·x·(1 + tanh(u)),  u = √(2/π)·(x + 0.044715·x³)
//   backward  dx = dy·[0.5·(1 + tanh(u)) + 0.5·x·(1 - tanh²(u))·√(2/π)·(1 + 3·0.044715·x²)]
// Shapes: any, all alike (flat n elements). fp32/bf16 in any mix, fp32 math with the accurate
// tanhf. Elementwise and read-before-write per element, so y may alias x and dx may alias dy. The
// amax output (ops.h) is folded in the same pass (elementwise.cuh).
#include "runtime/cuda/cuda_ops.h"
#include "runtime/cuda/elementwise.cuh"

namespace tetra::cuda {

namespace {
constexpr float kBeta = 0.7978845608028654f;  // √(2/π)
constexpr float kKappa = 0.044715f;

struct GeluForwardOp {
  __device__ float operator()(float x) const {
    const float u = kBeta * (x + kKappa * x * x * x);
    return 0.5f * x * (1.0f + tanhf(u));
  }
};

struct GeluBackwardOp {
  __device__ float operator()(float dy, float x) const {
    const float x2 = x * x;
    const float t = tanhf(kBeta * (x + kKappa * x2 * x));
    const float left_derivative = 0.5f * (1.0f + t);
    const float right_derivative = 0.5f * x * (1.0f - t * t) * kBeta * (1.0f + 3.0f * kKappa * x2);
    return dy * (left_derivative + right_derivative);
  }
};
}  // namespace

void gelu_forward(Tensor& y, const Tensor& x, Tensor* amax) {
  const char* op = "gelu_forward";
  check_cuda_float(op, "x", x);
  check_cuda_float(op, "y", y);
  check_shape(op, "y", y, x.shape());
  if (amax) check_cuda_tensor(op, "amax", *amax);
  unsigned* pa = amax ? static_cast<unsigned*>(amax->data_ptr()) : nullptr;
  DeviceScope scope(y.device());
  dispatch_float(y.dtype(), op, "y", [&](auto ty) {
    dispatch_float(x.dtype(), op, "x", [&](auto tx) {
      using TY = decltype(ty);
      using TX = decltype(tx);
      launch_map1(static_cast<TY*>(y.data_ptr()), static_cast<const TX*>(x.data_ptr()), y.numel(), GeluForwardOp{},
                  y.device(), pa);
    });
  });
}

// dx = f(dy, x), launched as y = f(a, b); the shapes are x's (the CPU op's order of checks).
void gelu_backward(Tensor& dx, const Tensor& dy, const Tensor& x, Tensor* amax) {
  check_cuda_tensor("gelu_backward", "x", x);
  check_shape("gelu_backward", "dx", dx, x.shape());
  if (amax) check_cuda_tensor("gelu_backward", "amax", *amax);
  map2_op("gelu_backward", GeluBackwardOp{}, dx, "dx", dy, "dy", x, "x", amax);
}

}  // namespace tetra::cuda
