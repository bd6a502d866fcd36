// The norms' fallback kernels (runtime/cuda/norm.cu, whose comment gives the formulas, shapes and
// dtypes); included only there (the anonymous namespace keeps them private to it).
//
// Fallback kernels (any C, any alignment): one warp per row, V = 8 or element by element, the row
// re-read from L1/L2 for each pass; backward dw/db through per-warp shared-memory sums (2·C fp32
// per warp plus one pad float per 8) folded into the same partials. Their shared memory bounds C
// at about (opt-in shared memory) / 9 bytes: 25K channels on an H100/H200.
#pragma once

#include <type_traits>

#include "runtime/cuda/kernel_common.cuh"
#include "runtime/cuda/norm_common.cuh"

namespace tetra::cuda {
namespace {

constexpr int kForwardWarps = 8;

// One row by one warp; returns the lane's max |y| bits as stored.
template <Norm K, int V, class TX, class TY, class P>
__device__ __forceinline__ unsigned norm_forward_row(TY* y, float* mean, float* rstd, const TX* x, const P* w,
                                                     const P* b, int64_t row, int C, float eps) {
  const int lane = threadIdx.x % 32;
  const TX* xr = x + row * C;
  TY* yr = y + row * C;

  float m = 0.0f;  // RMSNorm: no mean
  if constexpr (K == Norm::Layer) {
    float sum = 0.0f;
    for (int i = lane * V; i < C; i += 32 * V) {
      float v[V];
      load_vec<V>(xr + i, v);
#pragma unroll
      for (int j = 0; j < V; ++j) sum += v[j];
    }
    m = warp_sum(sum) / C;
  }

  float sq = 0.0f;
  for (int i = lane * V; i < C; i += 32 * V) {
    float v[V];
    load_vec<V>(xr + i, v);
#pragma unroll
    for (int j = 0; j < V; ++j) sq += (v[j] - m) * (v[j] - m);
  }
  const float s = 1.0f / sqrtf(warp_sum(sq) / C + eps);

  unsigned ymax = 0;
  for (int i = lane * V; i < C; i += 32 * V) {
    float v[V], wv[V], bv[V], out[V];
    load_vec<V>(xr + i, v);
    load_vec<V>(w + i, wv);
    if (K == Norm::Layer && b) {
      load_vec<V>(b + i, bv);
    } else {
#pragma unroll
      for (int j = 0; j < V; ++j) bv[j] = 0.0f;
    }
    if constexpr (K == Norm::Layer) {
#pragma unroll
      for (int j = 0; j < V; ++j) out[j] = (v[j] - m) * s * wv[j] + bv[j];
    } else {
#pragma unroll
      for (int j = 0; j < V; ++j) out[j] = v[j] * s * wv[j];
    }
    store_vec<V>(yr + i, out);  // y may alias x (TY = TX): this lane read these elements just above
#pragma unroll
    for (int j = 0; j < V; ++j) ymax = max(ymax, stored_abs_bits<TY>(out[j]));
  }
  if (lane == 0) {
    if constexpr (K == Norm::Layer) mean[row] = m;
    rstd[row] = s;
  }
  return ymax;
}

// A warp per row; amax and row_amax as norm_forward_rows_kernel's.
template <Norm K, int V, class TX, class TY, class P>
__global__ void norm_forward_kernel(TY* y, float* mean, float* rstd, const TX* x, const P* w, const P* b, int64_t N,
                                    int C, float eps, unsigned* amax, unsigned* row_amax) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  unsigned ymax = 0;
  if (row < N) {  // the whole warp together
    ymax = norm_forward_row<K, V>(y, mean, rstd, x, w, b, row, C, eps);
    warp_row_amax_to(row_amax, row, ymax);
  }
  block_amax_to(amax, ymax);
}

// Where channel c lives in a warp's shared-memory row. With V = 8, lane l touches channels l·8 + j
// at once (stride 8: an 8-way bank conflict); one pad float after every 8 makes the stride 9, which
// is conflict-free. A row then spans padded_width(C) floats.
template <int V>
__device__ __host__ __forceinline__ int smem_index(int c) {
  return V == 8 ? c + c / 8 : c;
}
template <int V>
__device__ __host__ __forceinline__ int padded_width(int C) {
  return smem_index<V>(C - 1) + 1;
}

// dx for rows blockIdx.x·warps + warp + k·gridDim.x·warps; the block's dw/db sums go to
// partial[0, blockIdx.x, :] and partial[1, blockIdx.x, :]. dres (may be null) is added to dx;
// dx_rounded (TA ≠ TX only; may be null) receives dx rounded to TA. amax and row_amax as the row
// kernel's.
// Dynamic shared memory: warps × [2][padded_width(C)] fp32.
template <Norm K, int V, class TA, class TX, class P>
__global__ void norm_backward_kernel(TX* dx, TA* dx_rounded, float* partial, const TA* dy, const TX* x, const P* w,
                                     const float* mean, const float* rstd, const TX* dres, int64_t N, int C,
                                     bool accumulate, unsigned* amax, unsigned* row_amax) {
  constexpr bool kMean = K == Norm::Layer;  // RMSNorm: mean is null, m = 0, no db
  extern __shared__ float smem[];
  const int warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int width = padded_width<V>(C);
  float* sdw = smem + static_cast<int64_t>(warp) * 2 * width;
  float* sdb = sdw + width;
  for (int i = lane * V; i < C; i += 32 * V) {
#pragma unroll
    for (int j = 0; j < V; ++j) sdw[smem_index<V>(i + j)] = sdb[smem_index<V>(i + j)] = 0.0f;
  }

  unsigned dmax = 0;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * warps + warp; row < N;
       row += static_cast<int64_t>(gridDim.x) * warps) {
    const TA* dyr = dy + row * C;
    const TX* xr = x + row * C;
    TX* dxr = dx + row * C;
    const float m = kMean ? mean[row] : 0.0f, s = rstd[row];

    // Pass 1: Σ g and Σ g·x̂ over the row; this warp's dw/db sums.
    float g_sum = 0.0f, gx_sum = 0.0f;
    for (int i = lane * V; i < C; i += 32 * V) {
      float dv[V], xv[V], wv[V];
      load_vec<V>(dyr + i, dv);
      load_vec<V>(xr + i, xv);
      load_vec<V>(w + i, wv);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float xh = (xv[j] - m) * s;
        const float g = dv[j] * wv[j];
        g_sum += g;
        gx_sum += g * xh;
        sdw[smem_index<V>(i + j)] += dv[j] * xh;
        if constexpr (kMean) sdb[smem_index<V>(i + j)] += dv[j];
      }
    }
    const float g_mean = kMean ? warp_sum(g_sum) / C : 0.0f;
    const float gx_mean = warp_sum(gx_sum) / C;

    // Pass 2: dx. dx may alias dy or dres: each element is re-read by the lane that then writes it.
    unsigned row_max = 0;
    for (int i = lane * V; i < C; i += 32 * V) {
      float dv[V], xv[V], wv[V], out[V];
      load_vec<V>(dyr + i, dv);
      load_vec<V>(xr + i, xv);
      load_vec<V>(w + i, wv);
      if (dres) {
        load_vec<V>(dres + row * C + i, out);
      } else if (accumulate) {
        load_vec<V>(dxr + i, out);
      } else {
#pragma unroll
        for (int j = 0; j < V; ++j) out[j] = 0.0f;
      }
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float xh = (xv[j] - m) * s;
        out[j] += s * (dv[j] * wv[j] - g_mean - xh * gx_mean);
      }
      store_vec<V>(dxr + i, out);
      if constexpr (!std::is_same_v<TA, TX>) {
        if (dx_rounded) store_vec<V>(dx_rounded + row * C + i, out);
      }
      if (amax || row_amax) fold_dx_amax<V, TA, TX>(row_max, out, dx_rounded != nullptr);
    }
    dmax = max(dmax, row_max);
    warp_row_amax_to(row_amax, row, row_max);
  }
  block_amax_to(amax, dmax);

  __syncthreads();
  float* out_dw = partial + static_cast<int64_t>(blockIdx.x) * C;
  float* out_db = partial + (static_cast<int64_t>(gridDim.x) + blockIdx.x) * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float sw = 0.0f, sb = 0.0f;
    const int at = smem_index<V>(c);
    for (int k = 0; k < warps; ++k) {
      sw += smem[static_cast<int64_t>(k) * 2 * width + at];
      sb += smem[static_cast<int64_t>(k) * 2 * width + width + at];
    }
    out_dw[c] = sw;
    if constexpr (kMean) out_db[c] = sb;
  }
}

}  // namespace
}  // namespace tetra::cuda
