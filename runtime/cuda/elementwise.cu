// CUDA elementwise ops: fill, zero, add, scale (runtime/ops.h). fp32 and bf16 in any mix, fp32
// arithmetic, 16-byte vectors where sizes and alignment allow (runtime/cuda/elementwise.cuh).
//   fill   x[n] = value                 (any dtype: ints take the value truncated toward zero)
//   zero   x[n] = 0                     (any dtype; all-zero bits)
//   add    y[n] = a[n] + b[n]           (y may alias a or b)
//   scale  x[n] *= s
//   add_bias  y[n, c] += b[c]
#include "runtime/cuda/cuda_ops.h"
#include "runtime/cuda/elementwise.cuh"
#include "runtime/fp8_format.h"

namespace tetra::cuda {

namespace {

// fill for the integer (and fp64) dtypes: x[i] = value, i < n.
template <class T>
__global__ void fill_scalar_kernel(T* x, int64_t n, T value) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) x[i] = value;
}

template <class T>
void fill_scalar(Tensor& x, T value) {
  const int64_t n = x.numel();
  if (n == 0) return;
  fill_scalar_kernel<T><<<grid_size(n, kMapThreads, x.device()), kMapThreads, 0, stream_of(x.device())>>>(
      static_cast<T*>(x.data_ptr()), n, value);
  TETRA_CUDA_CHECK_LAUNCH();
}

// y [n / channels, channels] += b per row. V elements a thread a step: 8 (16-byte vectors, one
// column index per vector) when channels % 8 == 0 and y and b are 16-byte aligned, so a vector never
// spans two rows; else 1. The FP8 projections' unfused path adds GPT-2's biases this way (1.3B: ≈ 29 GB
// a step, which the one-element kernel before took 23.5 ms for on one H200, a quarter of HBM's speed).
template <int V, class TY, class TB>
__global__ void add_bias_kernel(TY* y, const TB* b, int64_t n, int64_t channels) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x * V;
  for (int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * V; i < n; i += stride) {
    float v[V], w[V];
    load_vec<V>(y + i, v);
    load_vec<V>(b + i % channels, w);
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] += w[j];
    store_vec<V>(y + i, v);
  }
}

}  // namespace

void add_bias(Tensor& y, const Tensor& b) {
  check_cuda_float("add_bias", "y", y);
  check_cuda_float("add_bias", "b", b);
  const int64_t n = y.numel();
  if (n == 0) return;
  DeviceScope scope(y.device());
  dispatch_float(y.dtype(), "add_bias", "y", [&](auto ty) {
    dispatch_float(b.dtype(), "add_bias", "b", [&](auto tb) {
      using TY = decltype(ty);
      using TB = decltype(tb);
      TY* py = static_cast<TY*>(y.data_ptr());
      const TB* pb = static_cast<const TB*>(b.data_ptr());
      const int64_t c = b.numel();
      cudaStream_t s = stream_of(y.device());
      if (c % 8 == 0 && aligned16(py) && aligned16(pb))
        add_bias_kernel<8><<<grid_size(n / 8, kMapThreads, y.device()), kMapThreads, 0, s>>>(py, pb, n, c);
      else
        add_bias_kernel<1><<<grid_size(n, kMapThreads, y.device()), kMapThreads, 0, s>>>(py, pb, n, c);
      TETRA_CUDA_CHECK_LAUNCH();
    });
  });
}

void fill(Tensor& x, float value) {
  check_cuda_tensor("fill", "x", x);
  DeviceScope scope(x.device());
  switch (x.dtype()) {
    case DType::F32: return launch_map0(x.data<float>(), x.numel(), ConstantOp{value}, x.device());
    case DType::BF16:
      return launch_map0(static_cast<bf16*>(x.data_ptr()), x.numel(), ConstantOp{value}, x.device());
    case DType::F64: return fill_scalar<double>(x, value);
    case DType::I32: return fill_scalar<int32_t>(x, static_cast<int32_t>(value));
    case DType::I64: return fill_scalar<int64_t>(x, static_cast<int64_t>(value));
    case DType::U32: return fill_scalar<uint32_t>(x, static_cast<uint32_t>(value));
    case DType::U16: return fill_scalar<uint16_t>(x, static_cast<uint16_t>(value));
    case DType::U8: return fill_scalar<uint8_t>(x, static_cast<uint8_t>(value));
    case DType::F8E4M3:
    case DType::F8E5M2: return fill_scalar<uint8_t>(x, fp8_from_float(value, fp8_format_of(x.dtype())));
  }
}

void zero(Tensor& x) {
  check_cuda_tensor("zero", "x", x);
  if (x.nbytes() == 0) return;
  DeviceScope scope(x.device());
  TETRA_CUDA_CHECK(cudaMemsetAsync(x.data_ptr(), 0, x.nbytes(), stream_of(x.device())));
}

void add(Tensor& y, const Tensor& a, const Tensor& b) { map2_op("add", AddOp{}, y, "y", a, "a", b, "b"); }

void scale(Tensor& x, float s) {
  check_cuda_float("scale", "x", x);
  DeviceScope scope(x.device());
  dispatch_float(x.dtype(), "scale", "x", [&](auto tx) {
    using T = decltype(tx);
    T* p = static_cast<T*>(x.data_ptr());
    launch_map1(p, static_cast<const T*>(p), x.numel(), ScaleOp{s}, x.device());
  });
}

}  // namespace tetra::cuda
