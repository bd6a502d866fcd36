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

template <class TY, class TB>
__global__ void add_bias_kernel(TY* y, const TB* b, int64_t n, int64_t channels) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    y[i] = from_f32<TY>(to_f32(y[i]) + to_f32(b[i % channels]));
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
      add_bias_kernel<TY, TB><<<grid_size(n, kMapThreads, y.device()), kMapThreads, 0, stream_of(y.device())>>>(
          static_cast<TY*>(y.data_ptr()), static_cast<const TB*>(b.data_ptr()), n, b.numel());
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
