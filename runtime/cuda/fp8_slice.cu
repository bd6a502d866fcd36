// CUDA casts of a weight's flat slice and the FP8 transpose (runtime/ops.h), the twins of
// runtime/cpu/fp8_slice.cpp bit for bit. ZeRO-3 runs the slice casts once per step on each rank's
// shard, and the transpose per backward GEMM of a gathered FP8 weight.
//   fp8_slice_amax: a warp takes 32 · kRun consecutive elements, a lane kRun of them, keeping the
//     running max of its current group (|x| as unsigned bits: a NaN wins, as on the CPU) and raising
//     the group's amax with an atomicMax where the group changes; at the end of the run, when every
//     lane of the warp is in one group (always for Tensorwise, mostly for Blocks128's 128 × 128
//     blocks), the warp reduces first and one lane raises it.
//   fp8_slice_quantize: one thread an element: r = fp8_quant_factor(amax of its group), q =
//     cvt.rn.satfinite(x·r); the threads below scale.numel() write the scales (1/r, padding 0).
//   fp8_transpose: one thread an element of q_t (reads strided; a byte per element, once per
//     backward GEMM), and the scales by the first threads.
#include <cuda_fp8.h>

#include "runtime/cuda/cuda_ops.h"
#include "runtime/cuda/device_context.h"
#include "runtime/cuda/kernel_common.cuh"
#include "runtime/fp8_cast_shape.h"

namespace tetra::cuda {

namespace {

constexpr int kRun = 16;  // elements a lane takes in fp8_slice_amax
constexpr unsigned kFull = 0xffffffffu;

struct SliceGroups {
  int64_t rows, cols, group_rows, group_cols, scale_ld, scale_rows, scale_cols;
  bool rows_inner;
  __device__ int64_t of(int64_t e) const {  // e: element of w, row-major
    const int64_t m = e / cols, k = e % cols;
    return rows_inner ? (k / group_cols) * scale_ld + m / group_rows : (m / group_rows) * scale_ld + k / group_cols;
  }
  __device__ bool is_padding(int64_t g) const { return g % scale_ld >= (rows_inner ? scale_rows : scale_cols); }
};

SliceGroups slice_groups(const Fp8CastShape& s) {
  return {s.rows, s.cols, s.group_rows, s.group_cols, s.scale_ld, s.scale_rows, s.scale_cols, s.rows_inner};
}

template <class T>
__global__ void fp8_slice_amax_kernel(const T* __restrict__ x, int64_t n, int64_t begin, SliceGroups g,
                                      unsigned* amax) {
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  const int lane = static_cast<int>(threadIdx.x % 32);
  for (int64_t w = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32; w * 32 * kRun < n;
       w += warps) {
    const int64_t first = (w * 32 + lane) * kRun;
    int64_t group = first < n ? g.of(begin + first) : -1;
    unsigned m = 0;
    for (int j = 0; j < kRun && first + j < n; ++j) {
      const int64_t gj = g.of(begin + first + j);
      if (gj != group) {
        atomicMax(amax + group, m);
        group = gj;
        m = 0;
      }
      m = max(m, __float_as_uint(fabsf(to_f32(x[first + j]))));
    }
    // Lanes past the end join the first lane's group with nothing (0 raises no amax).
    const int64_t lead = __shfl_sync(kFull, group, 0);
    if (group < 0) group = lead;
    if (__all_sync(kFull, group == lead)) {
      m = __reduce_max_sync(kFull, m);
      if (lane == 0) atomicMax(amax + group, m);
    } else {
      atomicMax(amax + group, m);
    }
  }
}

__device__ __forceinline__ unsigned char to_fp8(float v, Fp8Format f) {
  return static_cast<unsigned char>(
      __nv_cvt_float_to_fp8(v, __NV_SATFINITE, f == Fp8Format::E4M3 ? __NV_E4M3 : __NV_E5M2));
}

template <class T>
__global__ void fp8_slice_quantize_kernel(const T* __restrict__ x, int64_t n, int64_t begin, SliceGroups g,
                                          const unsigned* __restrict__ amax, unsigned char* q, float* scale,
                                          int64_t scales, Fp8Format f) {
  const float largest = fp8_largest(f);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n || i < scales; i += stride) {
    if (i < scales)
      scale[i] = g.is_padding(i) ? 0.0f : 1.0f / fp8_quant_factor(__uint_as_float(amax[i]), largest);
    if (i < n) q[i] = to_fp8(to_f32(x[i]) * fp8_quant_factor(__uint_as_float(amax[g.of(begin + i)]), largest), f);
  }
}

// q_t[k, m] = q[m, k]; scale_t as fp8_transpose says (blocks: scale_t[j, i] = scale[i, j]).
__global__ void fp8_transpose_kernel(const unsigned char* __restrict__ q, unsigned char* q_t, int64_t M, int64_t K,
                                     const float* __restrict__ scale, float* scale_t, int64_t scales_t,
                                     int64_t ld_t, int64_t scale_rows, int64_t scale_ld, bool tensorwise) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < M * K || i < scales_t;
       i += stride) {
    if (i < M * K) q_t[i] = q[(i % M) * K + i / M];
    if (i < scales_t) {
      const int64_t j = i / ld_t, r = i % ld_t;
      scale_t[i] = tensorwise ? scale[0] : r < scale_rows ? scale[r * scale_ld + j] : 0.0f;
    }
  }
}

}  // namespace

void fp8_slice_amax(Tensor& amax, const Tensor& x, int64_t begin, int64_t rows, int64_t cols, ops::Fp8Scaling scaling) {
  const char* op = "fp8_slice_amax";
  check_cuda_tensor(op, "amax", amax);
  check_cuda_tensor(op, "x", x);
  const Fp8CastShape s = fp8_slice_shape(op, amax, x, begin, rows, cols, scaling);
  const int64_t n = x.numel();
  if (n == 0) return;
  const Device dev = x.device();
  DeviceScope device_scope(dev);
  dispatch_float(x.dtype(), op, "x", [&](auto tx) {
    using T = decltype(tx);
    const int64_t lanes = (n + kRun - 1) / kRun;
    fp8_slice_amax_kernel<T><<<grid_size(lanes, 256, dev), 256, 0, stream_of(dev)>>>(
        static_cast<const T*>(x.data_ptr()), n, begin, slice_groups(s), static_cast<unsigned*>(amax.data_ptr()));
    TETRA_CUDA_CHECK_LAUNCH();
  });
}

void fp8_slice_quantize(Tensor& q, Tensor& scale, const Tensor& x, const Tensor& amax, int64_t begin, int64_t rows,
                        int64_t cols, ops::Fp8Scaling scaling) {
  const char* op = "fp8_slice_quantize";
  for (auto [what, t] : {std::pair<const char*, const Tensor*>{"q", &q}, {"scale", &scale}, {"x", &x}, {"amax", &amax}})
    check_cuda_tensor(op, what, *t);
  const Fp8CastShape s = fp8_slice_shape(op, amax, x, begin, rows, cols, scaling, &q, &scale);
  const int64_t n = x.numel(), scales = scale.numel();
  if (n == 0 && scales == 0) return;
  const Device dev = x.device();
  DeviceScope device_scope(dev);
  dispatch_float(x.dtype(), op, "x", [&](auto tx) {
    using T = decltype(tx);
    fp8_slice_quantize_kernel<T><<<grid_size(std::max(n, scales), 256, dev), 256, 0, stream_of(dev)>>>(
        static_cast<const T*>(x.data_ptr()), n, begin, slice_groups(s), static_cast<const unsigned*>(amax.data_ptr()),
        static_cast<unsigned char*>(q.data_ptr()), scale.data<float>(), scales, s.format);
    TETRA_CUDA_CHECK_LAUNCH();
  });
}

void fp8_transpose(Tensor& q_t, Tensor& scale_t, const Tensor& q, const Tensor& scale, ops::Fp8Scaling scaling) {
  const char* op = "fp8_transpose";
  for (auto [what, t] :
       {std::pair<const char*, const Tensor*>{"q_t", &q_t}, {"scale_t", &scale_t}, {"q", &q}, {"scale", &scale}})
    check_cuda_tensor(op, what, *t);
  const Fp8CastShape s = fp8_transpose_shape(op, q_t, scale_t, q, scale, scaling);
  const int64_t items = std::max(s.rows * s.cols, scale_t.numel());
  if (items == 0) return;
  const Device dev = q.device();
  DeviceScope device_scope(dev);
  fp8_transpose_kernel<<<grid_size(items, 256, dev), 256, 0, stream_of(dev)>>>(
      static_cast<const unsigned char*>(q.data_ptr()), static_cast<unsigned char*>(q_t.data_ptr()), s.rows, s.cols,
      scale.data<float>(), scale_t.data<float>(), scale_t.numel(), scale_t.dim(-1), s.scale_rows, s.scale_ld,
      scaling == ops::Fp8Scaling::Tensorwise);
  TETRA_CUDA_CHECK_LAUNCH();
}

}  // namespace tetra::cuda
