// CUDA LayerNorm over the last dimension (torch.nn.functional.layer_norm):
//   forward   mean = Σx/C,  rstd = 1/√(Σ(x - mean)²/C + eps),  y = (x - mean)·rstd·w + b
//   backward  x̂ = (x - mean)·rstd,  g = dy·w
//             dx (+)= rstd·(g - mean_C(g) - x̂·mean_C(g·x̂)),  dw += Σ_rows dy·x̂,  db += Σ_rows dy
// Shapes: x, y, dx, dy [N, C] (any leading dimensions, one dtype T); w, b [C] (dtype P, b optional);
// mean, rstd [N] fp32; dw, db [C] (one dtype, db optional).
//
// One warp per row; the row is read in V-wide vectors (V = 8 when C % 8 == 0 and every pointer is
// 16-byte aligned) and re-read from L1/L2 for each pass, so no C limit applies to the forward.
// Backward, dw/db without atomics and deterministically: each warp keeps its own fp32 running sums
// for its rows in shared memory (a lane only touches its own channels), the block folds its warps
// in warp order into partial[{dw, db}, block, C] (fp32 scratch from the stream-ordered pool), and
// column_sum (runtime/cuda/reduce.h) adds Σ_block partial, in a fixed order, to dw and db. The
// scratch is [2, blocks, C] with blocks ≤ 4 × SMs (≈ 3 MB for GPT-2's C = 768). A block holds warps × 2·C fp32 in shared memory
// (plus one pad float per 8, against bank conflicts), which bounds C at about (opt-in shared
// memory) / 9 bytes: 25K channels on an H100/H200.
#include <algorithm>

#include "runtime/cuda/cuda_ops.h"
#include "runtime/cuda/device_context.h"
#include "runtime/cuda/kernel_common.cuh"
#include "runtime/cuda/reduce.h"

namespace tetra::cuda {

namespace {

constexpr int kForwardWarps = 8;

template <int V, class T, class P>
__global__ void layernorm_forward_kernel(T* y, float* mean, float* rstd, const T* x, const P* w, const P* b,
                                         int64_t N, int C, float eps) {
  const int lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= N) return;  // the whole warp leaves together
  const T* xr = x + row * C;
  T* yr = y + row * C;

  float sum = 0.0f;
  for (int i = lane * V; i < C; i += 32 * V) {
    float v[V];
    load_vec<V>(xr + i, v);
#pragma unroll
    for (int j = 0; j < V; ++j) sum += v[j];
  }
  const float m = warp_sum(sum) / C;

  float sq = 0.0f;
  for (int i = lane * V; i < C; i += 32 * V) {
    float v[V];
    load_vec<V>(xr + i, v);
#pragma unroll
    for (int j = 0; j < V; ++j) sq += (v[j] - m) * (v[j] - m);
  }
  const float s = 1.0f / sqrtf(warp_sum(sq) / C + eps);

  for (int i = lane * V; i < C; i += 32 * V) {
    float v[V], wv[V], bv[V], out[V];
    load_vec<V>(xr + i, v);
    load_vec<V>(w + i, wv);
    if (b) {
      load_vec<V>(b + i, bv);
    } else {
#pragma unroll
      for (int j = 0; j < V; ++j) bv[j] = 0.0f;
    }
#pragma unroll
    for (int j = 0; j < V; ++j) out[j] = (v[j] - m) * s * wv[j] + bv[j];
    store_vec<V>(yr + i, out);  // y may alias x: this lane read these elements just above
  }
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = s;
  }
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
// partial[0, blockIdx.x, :] and partial[1, blockIdx.x, :].
// Dynamic shared memory: warps × [2][padded_width(C)] fp32.
template <int V, class T, class P>
__global__ void layernorm_backward_kernel(T* dx, float* partial, const T* dy, const T* x, const P* w,
                                          const float* mean, const float* rstd, int64_t N, int C, bool accumulate) {
  extern __shared__ float smem[];
  const int warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int width = padded_width<V>(C);
  float* sdw = smem + static_cast<int64_t>(warp) * 2 * width;
  float* sdb = sdw + width;
  for (int i = lane * V; i < C; i += 32 * V) {
#pragma unroll
    for (int j = 0; j < V; ++j) sdw[smem_index<V>(i + j)] = sdb[smem_index<V>(i + j)] = 0.0f;
  }

  for (int64_t row = static_cast<int64_t>(blockIdx.x) * warps + warp; row < N;
       row += static_cast<int64_t>(gridDim.x) * warps) {
    const T* dyr = dy + row * C;
    const T* xr = x + row * C;
    T* dxr = dx + row * C;
    const float m = mean[row], s = rstd[row];

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
        sdb[smem_index<V>(i + j)] += dv[j];
      }
    }
    const float g_mean = warp_sum(g_sum) / C;
    const float gx_mean = warp_sum(gx_sum) / C;

    // Pass 2: dx. dx may alias dy: each element is re-read by the lane that then writes it.
    for (int i = lane * V; i < C; i += 32 * V) {
      float dv[V], xv[V], wv[V], out[V];
      load_vec<V>(dyr + i, dv);
      load_vec<V>(xr + i, xv);
      load_vec<V>(w + i, wv);
      if (accumulate) {
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
    }
  }

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
    out_db[c] = sb;
  }
}

void check_params(const char* op, const Tensor& w, const Tensor& b) {
  check_cuda_float(op, "w", w);
  if (w.ndim() != 1) TETRA_FAIL(Internal, op, ": w must be 1-D [C], got ", w.describe());
  if (b.defined()) {
    check_cuda_float(op, "b", b);
    check_dtype(op, "b", b, w.dtype());
    check_shape(op, "b", b, w.shape());
  }
}

void check_stats(const char* op, const Tensor& mean, const Tensor& rstd, const Tensor& x) {
  check_cuda_tensor(op, "mean", mean);
  check_dtype(op, "mean", mean, DType::F32);
  check_shape(op, "mean", mean, leading_shape(x));
  check_cuda_tensor(op, "rstd", rstd);
  check_dtype(op, "rstd", rstd, DType::F32);
  check_shape(op, "rstd", rstd, leading_shape(x));
}

int channels(const char* op, int64_t C) {
  if (C <= 0 || C > (int64_t{1} << 30)) TETRA_FAIL(Internal, op, ": cannot normalise rows of ", C, " channels");
  return static_cast<int>(C);
}

}  // namespace

void layernorm_forward(Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x, const Tensor& w, const Tensor& b,
                       float eps) {
  const char* op = "layernorm_forward";
  check_params(op, w, b);
  const int C = channels(op, w.dim(0));
  check_cuda_float(op, "x", x);
  check_last_dim(op, "x", x, C);
  check_cuda_float(op, "y", y);
  check_dtype(op, "y", y, x.dtype());
  check_shape(op, "y", y, x.shape());
  check_stats(op, mean, rstd, x);
  if (!(eps >= 0.0f)) TETRA_FAIL(Internal, op, ": eps must be ≥ 0, got ", eps);
  const int64_t N = rows_of(x);
  if (N == 0) return;
  const Device dev = y.device();
  DeviceScope scope(dev);
  const int blocks = static_cast<int>((N + kForwardWarps - 1) / kForwardWarps);
  const bool vec = C % 8 == 0 && aligned16(x.data_ptr()) && aligned16(y.data_ptr()) && aligned16(w.data_ptr()) &&
                   (!b.defined() || aligned16(b.data_ptr()));
  dispatch_float(x.dtype(), op, "x", [&](auto tx) {
    dispatch_float(w.dtype(), op, "w", [&](auto tw) {
      using T = decltype(tx);
      using P = decltype(tw);
      auto kernel = vec ? layernorm_forward_kernel<8, T, P> : layernorm_forward_kernel<1, T, P>;
      kernel<<<blocks, kForwardWarps * 32, 0, stream_of(dev)>>>(
          static_cast<T*>(y.data_ptr()), mean.data<float>(), rstd.data<float>(), static_cast<const T*>(x.data_ptr()),
          static_cast<const P*>(w.data_ptr()), b.defined() ? static_cast<const P*>(b.data_ptr()) : nullptr, N, C, eps);
      TETRA_CUDA_CHECK_LAUNCH();
    });
  });
}

void layernorm_backward(Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dy, const Tensor& x, const Tensor& w,
                        const Tensor& mean, const Tensor& rstd, bool accumulate_dx) {
  const char* op = "layernorm_backward";
  check_params(op, w, Tensor());
  const int C = channels(op, w.dim(0));
  check_cuda_float(op, "x", x);
  check_last_dim(op, "x", x, C);
  check_cuda_float(op, "dy", dy);
  check_dtype(op, "dy", dy, x.dtype());
  check_shape(op, "dy", dy, x.shape());
  check_cuda_float(op, "dx", dx);
  check_dtype(op, "dx", dx, x.dtype());
  check_shape(op, "dx", dx, x.shape());
  check_cuda_float(op, "dw", dw);
  check_shape(op, "dw", dw, {C});
  const bool with_db = db.defined();  // a LayerNorm without bias passes an undefined db
  if (with_db) {
    check_cuda_float(op, "db", db);
    check_dtype(op, "db", db, dw.dtype());
    check_shape(op, "db", db, {C});
  }
  check_stats(op, mean, rstd, x);
  const int64_t N = rows_of(x);
  if (N == 0) return;
  const Device dev = dx.device();
  DeviceScope scope(dev);
  cudaStream_t stream = stream_of(dev);

  const bool vec = C % 8 == 0 && aligned16(x.data_ptr()) && aligned16(dy.data_ptr()) && aligned16(dx.data_ptr()) &&
                   aligned16(w.data_ptr());
  const int width = vec ? padded_width<8>(C) : padded_width<1>(C);
  const int64_t per_warp = int64_t{2} * width * static_cast<int64_t>(sizeof(float));
  const int64_t optin = max_shared_optin(dev);
  if (per_warp > optin)
    TETRA_FAIL(Device, op, ": C = ", C, " needs ", per_warp, " bytes of shared memory per warp, more than the ", optin,
               " a block may have on ", dev.str());
  const int warps = static_cast<int>(std::clamp<int64_t>((48 * 1024) / per_warp, 1, 8));
  const int64_t smem = warps * per_warp;
  const int blocks = static_cast<int>(std::clamp<int64_t>((N + warps - 1) / warps, 1, 4 * sm_count(dev)));
  Tensor partial = Tensor::empty({2, blocks, C}, DType::F32, dev);

  dispatch_float(x.dtype(), op, "x", [&](auto tx) {
    dispatch_float(w.dtype(), op, "w", [&](auto tw) {
      using T = decltype(tx);
      using P = decltype(tw);
      auto kernel = vec ? layernorm_backward_kernel<8, T, P> : layernorm_backward_kernel<1, T, P>;
      if (smem > 48 * 1024)
        TETRA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
      kernel<<<blocks, warps * 32, static_cast<size_t>(smem), stream>>>(
          static_cast<T*>(dx.data_ptr()), partial.data<float>(), static_cast<const T*>(dy.data_ptr()),
          static_cast<const T*>(x.data_ptr()), static_cast<const P*>(w.data_ptr()), mean.data<float>(),
          rstd.data<float>(), N, C, accumulate_dx);
      TETRA_CUDA_CHECK_LAUNCH();
    });
  });
  // Weight gradients always accumulate: dw += Σ_block partial[0], db += Σ_block partial[1].
  const Tensor dw_part = partial.slice_flat(0, {blocks, C});
  column_sum(dw, dw_part, blocks, C, /*accumulate=*/true);
  if (with_db) {
    const Tensor db_part = partial.slice_flat(int64_t{blocks} * C, {blocks, C});
    column_sum(db, db_part, blocks, C, /*accumulate=*/true);
  }
}

}  // namespace tetra::cuda
