// CUDA FP8 casts (runtime/ops.h), the twins of runtime/cpu/fp8_cast.cpp bit for bit:
//   1. amax:     32×32 tiles of x (blocks of 32×8 threads, 4 rows each); a tile lies inside one
//                group (32 divides 128; Tensorwise has one), so one atomicMax per tile, or per tile
//                row for Rows1x128, on the group's amax held as unsigned bits in `scale`;
//   2. cast:     the same tiles, q = cvt.rn.satfinite(x·r) with r = fp8_quant_factor(amax); q_t
//                through a shared-memory tile so both stores are coalesced;
//   3. finalise: scale[g] = 1/r.
// Bytes: reads x twice, writes q (and q_t) once: bf16 [16384, 2048] ≈ 0.13 GB (≈ 30 µs at 4.3 TB/s).
// A first version for correctness; the recipes' fused casts (in the norm, activation and permute
// kernels) come with the FP8 GEMMs.
#include <cuda_fp8.h>

#include "runtime/cuda/cuda_ops.h"
#include "runtime/cuda/device_context.h"
#include "runtime/cuda/kernel_common.cuh"
#include "runtime/fp8_cast_shape.h"

namespace tetra::cuda {

namespace {

constexpr int kTile = 32, kTileRowsPerThread = 4;  // blocks of kTile × (kTile / 4) threads

struct Groups {
  int64_t rows, cols, group_rows, group_cols, scale_rows, scale_cols;  // as Fp8CastShape
  bool rows_inner;
  __device__ int64_t of(int64_t m, int64_t k) const {
    return rows_inner ? (k / group_cols) * scale_rows + m / group_rows : (m / group_rows) * scale_cols + k / group_cols;
  }
};

Groups groups_of(const Fp8CastShape& s) { return {s.rows, s.cols, s.group_rows, s.group_cols, s.scale_rows, s.scale_cols, s.rows_inner};
}

__device__ __forceinline__ unsigned char to_fp8(float v, Fp8Format f) {
  return __nv_cvt_float_to_fp8(v, __NV_SATFINITE, f == Fp8Format::E4M3 ? __NV_E4M3 : __NV_E5M2);
}

__device__ __forceinline__ float from_fp8(unsigned char c, Fp8Format f) {
  const __half_raw h = __nv_cvt_fp8_to_halfraw(c, f == Fp8Format::E4M3 ? __NV_E4M3 : __NV_E5M2);
  return __half2float(__half(h));
}

template <class T>
__global__ void fp8_amax_kernel(const T* x, Groups g, unsigned* amax_bits) {
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kTile + threadIdx.x;
  for (int64_t tile_row = blockIdx.y; tile_row * kTile < g.rows; tile_row += gridDim.y) {
    unsigned rows_max = 0;
    for (int i = 0; i < kTileRowsPerThread; ++i) {
      const int64_t row = tile_row * kTile + threadIdx.y + i * (kTile / kTileRowsPerThread);
      const bool in = row < g.rows && col < g.cols;
      const unsigned v = in ? __float_as_uint(fabsf(to_f32(x[row * g.cols + col]))) : 0u;
      if (g.group_rows == 1) {  // Rows1x128: a group per row
        const unsigned row_max = __reduce_max_sync(0xffffffffu, v);
        if (threadIdx.x == 0 && row < g.rows) atomicMax(&amax_bits[g.of(row, blockIdx.x * kTile)], row_max);
      } else {
        rows_max = max(rows_max, v);
      }
    }
    if (g.group_rows == 1) continue;
    __shared__ unsigned warp_max[kTile / kTileRowsPerThread];
    const unsigned w = __reduce_max_sync(0xffffffffu, rows_max);
    if (threadIdx.x == 0) warp_max[threadIdx.y] = w;
    __syncthreads();
    if (threadIdx.x == 0 && threadIdx.y == 0) {
      unsigned t = 0;
      for (int i = 0; i < kTile / kTileRowsPerThread; ++i) t = max(t, warp_max[i]);
      atomicMax(&amax_bits[g.of(tile_row * kTile, static_cast<int64_t>(blockIdx.x) * kTile)], t);
    }
    __syncthreads();
  }
}

template <class T>
__global__ void fp8_cast_kernel(const T* x, Groups g, const unsigned* amax_bits, Fp8Format f, unsigned char* q,
                                unsigned char* q_t) {
  __shared__ unsigned char tile[kTile][kTile + 1];
  const float largest = f == Fp8Format::E4M3 ? 448.0f : 57344.0f;
  const int64_t col0 = static_cast<int64_t>(blockIdx.x) * kTile;
  for (int64_t tile_row = blockIdx.y; tile_row * kTile < g.rows; tile_row += gridDim.y) {
    for (int i = 0; i < kTileRowsPerThread; ++i) {
      const int r = threadIdx.y + i * (kTile / kTileRowsPerThread);
      const int64_t row = tile_row * kTile + r, col = col0 + threadIdx.x;
      if (row >= g.rows || col >= g.cols) continue;
      const float factor = fp8_quant_factor(__uint_as_float(amax_bits[g.of(row, col)]), largest);
      const unsigned char code = to_fp8(__fmul_rn(to_f32(x[row * g.cols + col]), factor), f);
      q[row * g.cols + col] = code;
      tile[r][threadIdx.x] = code;
    }
    if (!q_t) continue;
    __syncthreads();
    for (int i = 0; i < kTileRowsPerThread; ++i) {  // q_t[k, m]: thread x walks m
      const int c = threadIdx.y + i * (kTile / kTileRowsPerThread);
      const int64_t col = col0 + c, row = tile_row * kTile + threadIdx.x;
      if (row < g.rows && col < g.cols) q_t[col * g.rows + row] = tile[threadIdx.x][c];
    }
    __syncthreads();
  }
}

__global__ void fp8_finalise_kernel(float* scale, int64_t n, float largest) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    scale[i] = 1.0f / fp8_quant_factor(scale[i], largest);  // scale[i] holds the amax bits
}

template <class T>
__global__ void fp8_dequantize_kernel(T* y, Groups g, const unsigned char* q, const float* scale, Fp8Format f) {
  const int64_t n = g.rows * g.cols;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] = from_f32<T>(from_fp8(q[i], f) * scale[g.of(i / g.cols, i % g.cols)]);
}

dim3 tile_grid(const Fp8CastShape& s) {
  const int64_t across = (s.cols + kTile - 1) / kTile, down = (s.rows + kTile - 1) / kTile;
  return dim3(static_cast<unsigned>(across), static_cast<unsigned>(std::min<int64_t>(down, 65535)));
}

}  // namespace

void fp8_quantize(Tensor& q, Tensor& scale, const Tensor& x, ops::Fp8Scaling scaling, Tensor* q_t, Tensor* scale_t) {
  const char* op = "fp8_quantize";
  check_cuda_tensor(op, "q", q);
  check_cuda_tensor(op, "scale", scale);
  check_cuda_tensor(op, "x", x);
  const Fp8CastShape s = fp8_cast_shape(op, q, scale, x, scaling, q_t, scale_t);
  if (given(q_t) && scaling != ops::Fp8Scaling::Tensorwise)
    TETRA_FAIL(Internal, op, ": the transposed copy of block scaling is not implemented on CUDA");
  const Device dev = x.device();
  DeviceScope device_scope(dev);
  cudaStream_t stream = stream_of(dev);
  // The amax of each group accumulates in `scale` (unsigned bits of |x|) until the last kernel.
  TETRA_CUDA_CHECK(cudaMemsetAsync(scale.data_ptr(), 0, scale.nbytes(), stream));
  if (s.rows == 0 || s.cols == 0) {
    fp8_finalise_kernel<<<1, 32, 0, stream>>>(scale.data<float>(), scale.numel(), fp8_largest(s.format));
    TETRA_CUDA_CHECK_LAUNCH();
    return;
  }
  auto* amax = static_cast<unsigned*>(scale.data_ptr());
  unsigned char* qt = given(q_t) ? static_cast<unsigned char*>(q_t->data_ptr()) : nullptr;
  const dim3 block(kTile, kTile / kTileRowsPerThread);
  dispatch_float(x.dtype(), op, "x", [&](auto tx) {
    using T = decltype(tx);
    const T* px = static_cast<const T*>(x.data_ptr());
    fp8_amax_kernel<T><<<tile_grid(s), block, 0, stream>>>(px, groups_of(s), amax);
    TETRA_CUDA_CHECK_LAUNCH();
    fp8_cast_kernel<T><<<tile_grid(s), block, 0, stream>>>(px, groups_of(s), amax, s.format,
                                                           static_cast<unsigned char*>(q.data_ptr()), qt);
    TETRA_CUDA_CHECK_LAUNCH();
  });
  fp8_finalise_kernel<<<grid_size(scale.numel(), 256, dev), 256, 0, stream>>>(scale.data<float>(), scale.numel(),
                                                                            fp8_largest(s.format));
  TETRA_CUDA_CHECK_LAUNCH();
  if (given(scale_t))
    TETRA_CUDA_CHECK(cudaMemcpyAsync(scale_t->data_ptr(), scale.data_ptr(), scale.nbytes(), cudaMemcpyDeviceToDevice, stream));
}

void fp8_dequantize(Tensor& y, const Tensor& q, const Tensor& scale, ops::Fp8Scaling scaling) {
  const char* op = "fp8_dequantize";
  check_cuda_tensor(op, "q", q);
  check_cuda_tensor(op, "scale", scale);
  check_cuda_tensor(op, "y", y);
  const Fp8CastShape s = fp8_cast_shape(op, q, scale, y, scaling);
  if (s.rows == 0 || s.cols == 0) return;
  const Device dev = y.device();
  DeviceScope device_scope(dev);
  cudaStream_t stream = stream_of(dev);
  dispatch_float(y.dtype(), op, "y", [&](auto ty) {
    using T = decltype(ty);
    fp8_dequantize_kernel<T><<<grid_size(s.rows * s.cols, 256, dev), 256, 0, stream>>>(
        static_cast<T*>(y.data_ptr()), groups_of(s), static_cast<const unsigned char*>(q.data_ptr()),
        scale.data<float>(), s.format);
    TETRA_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace tetra::cuda
