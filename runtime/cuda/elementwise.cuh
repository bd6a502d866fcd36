// Elementwise map kernels shared by the CUDA ops (fill, add, scale, copy conversion, GELU):
//   map0: y[i] = f()            map1: y[i] = f(x[i])            map2: y[i] = f(a[i], b[i])
// Shapes: flat, n elements each. Each thread handles V elements per step of a grid-stride loop;
// V = 8 (16-byte vectors) when n % 8 == 0 and every pointer is 16-byte aligned, else V = 1.
// Reads of element i happen before its write by the same thread, so y may alias x, a or b.
#pragma once
#include "runtime/cuda/device_context.h"
#include "runtime/cuda/kernel_common.cuh"

namespace tetra::cuda {

template <int V, class TY, class F>
__global__ void map0_kernel(TY* y, int64_t n, F f) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x * V;
  for (int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * V; i < n; i += stride) {
    float r[V];
#pragma unroll
    for (int j = 0; j < V; ++j) r[j] = f();
    store_vec<V>(y + i, r);
  }
}

template <int V, class TY, class TX, class F>
__global__ void map1_kernel(TY* y, const TX* x, int64_t n, F f) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x * V;
  for (int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * V; i < n; i += stride) {
    float a[V], r[V];
    load_vec<V>(x + i, a);
#pragma unroll
    for (int j = 0; j < V; ++j) r[j] = f(a[j]);
    store_vec<V>(y + i, r);
  }
}

template <int V, class TY, class TA, class TB, class F>
__global__ void map2_kernel(TY* y, const TA* a, const TB* b, int64_t n, F f) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x * V;
  for (int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * V; i < n; i += stride) {
    float va[V], vb[V], r[V];
    load_vec<V>(a + i, va);
    load_vec<V>(b + i, vb);
#pragma unroll
    for (int j = 0; j < V; ++j) r[j] = f(va[j], vb[j]);
    store_vec<V>(y + i, r);
  }
}

constexpr int kMapThreads = 256;

template <class TY, class F>
void launch_map0(TY* y, int64_t n, F f, Device dev) {
  if (n == 0) return;
  cudaStream_t s = stream_of(dev);
  if (n % 8 == 0 && aligned16(y)) {
    map0_kernel<8><<<grid_size(n / 8, kMapThreads, dev), kMapThreads, 0, s>>>(y, n, f);
  } else {
    map0_kernel<1><<<grid_size(n, kMapThreads, dev), kMapThreads, 0, s>>>(y, n, f);
  }
  TETRA_CUDA_CHECK_LAUNCH();
}

template <class TY, class TX, class F>
void launch_map1(TY* y, const TX* x, int64_t n, F f, Device dev) {
  if (n == 0) return;
  cudaStream_t s = stream_of(dev);
  if (n % 8 == 0 && aligned16(y) && aligned16(x)) {
    map1_kernel<8><<<grid_size(n / 8, kMapThreads, dev), kMapThreads, 0, s>>>(y, x, n, f);
  } else {
    map1_kernel<1><<<grid_size(n, kMapThreads, dev), kMapThreads, 0, s>>>(y, x, n, f);
  }
  TETRA_CUDA_CHECK_LAUNCH();
}

template <class TY, class TA, class TB, class F>
void launch_map2(TY* y, const TA* a, const TB* b, int64_t n, F f, Device dev) {
  if (n == 0) return;
  cudaStream_t s = stream_of(dev);
  if (n % 8 == 0 && aligned16(y) && aligned16(a) && aligned16(b)) {
    map2_kernel<8><<<grid_size(n / 8, kMapThreads, dev), kMapThreads, 0, s>>>(y, a, b, n, f);
  } else {
    map2_kernel<1><<<grid_size(n, kMapThreads, dev), kMapThreads, 0, s>>>(y, a, b, n, f);
  }
  TETRA_CUDA_CHECK_LAUNCH();
}

// An op y = f(a, b) over CUDA tensors of y's shape, each fp32 or bf16 (any mix): the argument
// checks, errors naming the op and each argument as the op's signature does, then map2.
template <class F>
void map2_op(const char* op, F f, Tensor& y, const char* y_name, const Tensor& a, const char* a_name,
             const Tensor& b, const char* b_name) {
  check_cuda_float(op, y_name, y);
  check_cuda_float(op, a_name, a);
  check_cuda_float(op, b_name, b);
  check_shape(op, a_name, a, y.shape());
  check_shape(op, b_name, b, y.shape());
  DeviceScope scope(y.device());
  dispatch_floats(
      op,
      [&](auto ty, auto ta, auto tb) {
        using TY = decltype(ty);
        using TA = decltype(ta);
        using TB = decltype(tb);
        launch_map2(static_cast<TY*>(y.data_ptr()), static_cast<const TA*>(a.data_ptr()),
                    static_cast<const TB*>(b.data_ptr()), y.numel(), f, y.device());
      },
      y.dtype(), y_name, a.dtype(), a_name, b.dtype(), b_name);
}

// The elementwise functors.
struct ConstantOp {
  float value;
  __device__ float operator()() const { return value; }
};
struct IdentityOp {
  __device__ float operator()(float x) const { return x; }
};
struct ScaleOp {
  float s;
  __device__ float operator()(float x) const { return x * s; }
};
struct AddOp {
  __device__ float operator()(float a, float b) const { return a + b; }
};

}  // namespace tetra::cuda
