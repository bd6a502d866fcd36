// Elementwise map kernels shared by the CUDA ops (fill, add, scale, copy conversion, GELU):
//   map0: y[i] = f()            map1: y[i] = f(x[i])            map2: y[i] = f(a[i], b[i])
// Shapes: flat, n elements each. Each thread handles V elements per step of a grid-stride loop;
// V = 8 (16-byte vectors) when n % 8 == 0 and every pointer is 16-byte aligned, else V = 1.
// Reads of element i happen before its write by the same thread, so y may alias x, a or b.
// map1 and map2 with an amax (U32 [1], zeroed by the launcher) fold the largest |y| as stored into
// it (ops.h's amax outputs: the FP8 cast of y that follows reads y once).
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

// The largest |r[j]| as stored in TY, folded into m (A: with an amax output).
template <bool A, class TY, int V>
__device__ __forceinline__ void fold_amax(unsigned& m, const float (&r)[V]) {
  if constexpr (A) {
#pragma unroll
    for (int j = 0; j < V; ++j) m = max(m, stored_abs_bits<TY>(r[j]));
  }
}

template <int V, bool A, class TY, class TX, class F>
__global__ void map1_kernel(TY* y, const TX* x, int64_t n, F f, unsigned* amax) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x * V;
  unsigned m = 0;
  for (int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * V; i < n; i += stride) {
    float a[V], r[V];
    load_vec<V>(x + i, a);
#pragma unroll
    for (int j = 0; j < V; ++j) r[j] = f(a[j]);
    store_vec<V>(y + i, r);
    fold_amax<A, TY>(m, r);
  }
  if constexpr (A) block_amax_to(amax, m);
}

template <int V, bool A, class TY, class TA, class TB, class F>
__global__ void map2_kernel(TY* y, const TA* a, const TB* b, int64_t n, F f, unsigned* amax) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x * V;
  unsigned m = 0;
  for (int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * V; i < n; i += stride) {
    float va[V], vb[V], r[V];
    load_vec<V>(a + i, va);
    load_vec<V>(b + i, vb);
#pragma unroll
    for (int j = 0; j < V; ++j) r[j] = f(va[j], vb[j]);
    store_vec<V>(y + i, r);
    fold_amax<A, TY>(m, r);
  }
  if constexpr (A) block_amax_to(amax, m);
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

// amax (may be null): zeroed on the stream, then the kernel folds into it.
inline void zero_amax(unsigned* amax, cudaStream_t s) {
  if (amax) TETRA_CUDA_CHECK(cudaMemsetAsync(amax, 0, sizeof(unsigned), s));
}

template <bool A, class TY, class TX, class F>
void launch_map1_as(TY* y, const TX* x, int64_t n, F f, Device dev, unsigned* amax) {
  cudaStream_t s = stream_of(dev);
  if (n % 8 == 0 && aligned16(y) && aligned16(x)) {
    map1_kernel<8, A><<<grid_size(n / 8, kMapThreads, dev), kMapThreads, 0, s>>>(y, x, n, f, amax);
  } else {
    map1_kernel<1, A><<<grid_size(n, kMapThreads, dev), kMapThreads, 0, s>>>(y, x, n, f, amax);
  }
  TETRA_CUDA_CHECK_LAUNCH();
}

template <class TY, class TX, class F>
void launch_map1(TY* y, const TX* x, int64_t n, F f, Device dev, unsigned* amax = nullptr) {
  zero_amax(amax, stream_of(dev));
  if (n == 0) return;
  if (amax) launch_map1_as<true>(y, x, n, f, dev, amax);
  else launch_map1_as<false>(y, x, n, f, dev, amax);
}

template <bool A, class TY, class TA, class TB, class F>
void launch_map2_as(TY* y, const TA* a, const TB* b, int64_t n, F f, Device dev, unsigned* amax) {
  cudaStream_t s = stream_of(dev);
  if (n % 8 == 0 && aligned16(y) && aligned16(a) && aligned16(b)) {
    map2_kernel<8, A><<<grid_size(n / 8, kMapThreads, dev), kMapThreads, 0, s>>>(y, a, b, n, f, amax);
  } else {
    map2_kernel<1, A><<<grid_size(n, kMapThreads, dev), kMapThreads, 0, s>>>(y, a, b, n, f, amax);
  }
  TETRA_CUDA_CHECK_LAUNCH();
}

template <class TY, class TA, class TB, class F>
void launch_map2(TY* y, const TA* a, const TB* b, int64_t n, F f, Device dev, unsigned* amax = nullptr) {
  zero_amax(amax, stream_of(dev));
  if (n == 0) return;
  if (amax) launch_map2_as<true>(y, a, b, n, f, dev, amax);
  else launch_map2_as<false>(y, a, b, n, f, dev, amax);
}

// An op y = f(a, b) over CUDA tensors of y's shape, each fp32 or bf16 (any mix): the argument
// checks, errors naming the op and each argument as the op's signature does, then map2. amax (may be
// null): U32 [1] on y's device, receives the largest |y| as stored.
template <class F>
void map2_op(const char* op, F f, Tensor& y, const char* y_name, const Tensor& a, const char* a_name,
             const Tensor& b, const char* b_name, Tensor* amax = nullptr) {
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
                    static_cast<const TB*>(b.data_ptr()), y.numel(), f, y.device(),
                    amax ? static_cast<unsigned*>(amax->data_ptr()) : nullptr);
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
