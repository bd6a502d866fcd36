// Reference causal attention kernels: plain CUDA, fp32 math on fp32 or bf16 tensors, deterministic
// (no atomics). Used for fp32 tensors, for bf16 where cuDNN cannot run, and to check cuDNN against.
// Layout: qkv[B, T, (H + 2·Hkv)·D] = H q heads | Hkv k heads | Hkv v heads per token, each D values;
// out, dout [B, T, H·D]; lse [B, H, T]. Query head h reads key/value head h / G, G = H / Hkv (grouped-
// query attention; G = 1 is plain multi-head). With s = 1/√D and j ≤ i (causal):
//   forward   lse_i = log Σ_j exp(s·q_i·k_j)      out_i = Σ_j exp(s·q_i·k_j − lse_i)·v_j
//   backward  P_ij = exp(s·q_i·k_j − lse_i)      Δ_i = Σ_d dout_i ∘ out_i
//             dS_ij = P_ij·(dout_i·v_j − Δ_i)     dq_i = s·Σ_j dS_ij·k_j
//             dk_j = s·Σ_i dS_ij·q_i              dv_j = Σ_i P_ij·dout_i
// Tiling (FlashAttention-2 style, without tensor cores): a block of 4 warps owns 16 rows (queries for
// the forward and dq, keys for dk/dv), 4 per warp, and streams the other side through shared memory
// in tiles of 32 rows. Dot products run lane ↔ tile row (each lane one full dot product of length D);
// accumulations run lane ↔ feature d (each lane D/32 features, tile values broadcast by shuffles).
// The forward keeps an online softmax (running max and sum) per query; the backward recomputes P
// from lse and is split in a dq kernel and a dk/dv kernel so that nothing is accumulated atomically:
// a dk/dv block owns 16 keys of one key/value head and streams the queries of each of its G heads in
// turn, summing dk and dv over the group in registers.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>

#include "runtime/cuda/attention.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/device_context.h"

namespace tetra::cuda {

namespace {

constexpr int kWarps = 4;                  // warps per block
constexpr int kRowsPerWarp = 4;            // own rows (queries or keys) per warp
constexpr int kOwnRows = kWarps * kRowsPerWarp;
constexpr int kTile = 32;                  // rows of the streamed side per tile (= lanes)
constexpr int kThreads = kWarps * 32;
constexpr int kMaxHeadDim = 256;
constexpr unsigned kFull = 0xffffffffu;

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
template <class T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) { return x; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFull, v, o));
  return v;
}

// Σ_d a[d]·b[d] over d < D, both in shared memory.
__device__ __forceinline__ float dot(const float* a, const float* b, int D) {
  float acc = 0.f;
  for (int d = 0; d < D; ++d) acc = fmaf(a[d], b[d], acc);
  return acc;
}

// dst[r·ld + c] = scale·src[(row0 + r)·src_stride + c] for r < rows, c < DP (the padded head dim);
// zero past the sequence (row0 + r ≥ n_rows) and past the head dim (c ≥ D). All threads take part.
template <class T>
__device__ void load_rows(float* dst, int ld, const T* src, int64_t src_stride, int row0, int rows, int n_rows,
                          int D, int DP, float scale) {
  for (int e = threadIdx.x; e < rows * DP; e += blockDim.x) {
    const int r = e / DP, c = e % DP;
    float v = 0.f;
    if (row0 + r < n_rows && c < D) v = scale * to_float(src[static_cast<int64_t>(row0 + r) * src_stride + c]);
    dst[r * ld + c] = v;
  }
}

// ---------- forward ----------
// grid (⌈T/16⌉, H, B), 128 threads; block (·, h, b) reads key/value head h / (H / Hkv). Shared: Qs[16][DP] (s·q, own queries), Ks[32][DP+1] (key tile,
// padded so lane j reading row j is conflict-free), Vs[32][DP] (value tile, read along d).
template <class T, int NR>
__global__ void __launch_bounds__(kThreads)
    attention_forward_kernel(T* __restrict__ out, float* __restrict__ lse, const T* __restrict__ qkv, int n_tok,
                             int H, int Hkv, int D, float scale) {
  constexpr int DP = 32 * NR;
  extern __shared__ float smem[];
  float* Qs = smem;
  float* Ks = Qs + kOwnRows * DP;
  float* Vs = Ks + kTile * (DP + 1);

  const int b = blockIdx.z, h = blockIdx.y, q0 = blockIdx.x * kOwnRows;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row3 = static_cast<int64_t>(H + 2 * Hkv) * D;
  const T* tok0 = qkv + static_cast<int64_t>(b) * n_tok * row3;
  const T* q_base = tok0 + static_cast<int64_t>(h) * D;
  const T* k_base = tok0 + static_cast<int64_t>(H + h / (H / Hkv)) * D;
  const T* v_base = k_base + static_cast<int64_t>(Hkv) * D;

  load_rows(Qs, DP, q_base, row3, q0, kOwnRows, n_tok, D, DP, scale);

  float m[kRowsPerWarp], l[kRowsPerWarp], o[kRowsPerWarp][NR];
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    m[rr] = -INFINITY;
    l[rr] = 0.f;
#pragma unroll
    for (int r = 0; r < NR; ++r) o[rr][r] = 0.f;
  }

  const int q_last = min(q0 + kOwnRows, n_tok) - 1;
  for (int k0 = 0; k0 <= q_last; k0 += kTile) {
    __syncthreads();  // the previous tile is consumed (and Qs is loaded, on the first pass)
    load_rows(Ks, DP + 1, k_base, row3, k0, kTile, n_tok, D, DP, 1.f);
    load_rows(Vs, DP, v_base, row3, k0, kTile, n_tok, D, DP, 1.f);
    __syncthreads();
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; ++rr) {
      const int qi = warp * kRowsPerWarp + rr, i = q0 + qi;
      if (i >= n_tok || k0 > i) continue;  // warp-uniform
      const bool valid = k0 + lane <= i;
      const float s = valid ? dot(Qs + qi * DP, Ks + lane * (DP + 1), D) : -INFINITY;
      const float m_new = fmaxf(m[rr], warp_max(s));  // finite: key k0 ≤ i is valid
      const float p = valid ? expf(s - m_new) : 0.f;
      const float corr = expf(m[rr] - m_new);        // 0 on the first tile (m = −∞)
      l[rr] = l[rr] * corr + warp_sum(p);
      m[rr] = m_new;
#pragma unroll
      for (int r = 0; r < NR; ++r) o[rr][r] *= corr;
      const int n_valid = min(kTile, i - k0 + 1);
      for (int jj = 0; jj < n_valid; ++jj) {
        const float pj = __shfl_sync(kFull, p, jj);
#pragma unroll
        for (int r = 0; r < NR; ++r) o[rr][r] = fmaf(pj, Vs[jj * DP + lane + 32 * r], o[rr][r]);
      }
    }
  }

#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    const int i = q0 + warp * kRowsPerWarp + rr;
    if (i >= n_tok) continue;
    const float inv_l = 1.f / l[rr];
    T* out_row = out + (static_cast<int64_t>(b) * n_tok + i) * H * D + static_cast<int64_t>(h) * D;
#pragma unroll
    for (int r = 0; r < NR; ++r) {
      const int d = lane + 32 * r;
      if (d < D) out_row[d] = from_float<T>(o[rr][r] * inv_l);
    }
    if (lane == 0) lse[(static_cast<int64_t>(b) * H + h) * n_tok + i] = m[rr] + logf(l[rr]);
  }
}

// ---------- backward: Δ = rowsum(dout ∘ out) ----------
// One warp per (b, i, h) row; Δ[B, H, T] fp32.
template <class T>
__global__ void attention_delta_kernel(float* __restrict__ delta, const T* __restrict__ dout,
                                       const T* __restrict__ out, int B, int n_tok, int H, int D) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;  // over (b, i, h)
  const int lane = threadIdx.x % 32;
  if (row >= static_cast<int64_t>(B) * n_tok * H) return;  // whole warps exit together
  const int h = static_cast<int>(row % H);
  const int64_t bi = row / H;  // b·T + i
  const T* o = out + row * D;
  const T* g = dout + row * D;
  float acc = 0.f;
  for (int d = lane; d < D; d += 32) acc = fmaf(to_float(g[d]), to_float(o[d]), acc);
  acc = warp_sum(acc);
  if (lane == 0) {
    const int64_t b = bi / n_tok, i = bi % n_tok;
    delta[(b * H + h) * n_tok + i] = acc;
  }
}

// ---------- backward: dq ----------
// grid (⌈T/16⌉, H, B), 128 threads; own rows are queries of head h, keys of head h / (H / Hkv). Shared: Qs[16][DP] (s·q), dOs[16][DP],
// Ks[32][DP+1], Vs[32][DP+1] (key/value tiles, padded for lane ↔ row dot products).
template <class T, int NR>
__global__ void __launch_bounds__(kThreads)
    attention_backward_dq_kernel(T* __restrict__ dqkv, const T* __restrict__ dout, const T* __restrict__ qkv,
                                 const float* __restrict__ lse, const float* __restrict__ delta, int n_tok, int H,
                                 int Hkv, int D, float scale) {
  constexpr int DP = 32 * NR;
  extern __shared__ float smem[];
  float* Qs = smem;
  float* dOs = Qs + kOwnRows * DP;
  float* Ks = dOs + kOwnRows * DP;
  float* Vs = Ks + kTile * (DP + 1);

  const int b = blockIdx.z, h = blockIdx.y, q0 = blockIdx.x * kOwnRows;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row3 = static_cast<int64_t>(H + 2 * Hkv) * D, row1 = static_cast<int64_t>(H) * D;
  const T* tok0 = qkv + static_cast<int64_t>(b) * n_tok * row3;
  const T* q_base = tok0 + static_cast<int64_t>(h) * D;
  const T* k_base = tok0 + static_cast<int64_t>(H + h / (H / Hkv)) * D;
  const T* v_base = k_base + static_cast<int64_t>(Hkv) * D;
  const T* do_base = dout + static_cast<int64_t>(b) * n_tok * row1 + static_cast<int64_t>(h) * D;
  const float* lse_bh = lse + (static_cast<int64_t>(b) * H + h) * n_tok;
  const float* delta_bh = delta + (static_cast<int64_t>(b) * H + h) * n_tok;

  load_rows(Qs, DP, q_base, row3, q0, kOwnRows, n_tok, D, DP, scale);
  load_rows(dOs, DP, do_base, row1, q0, kOwnRows, n_tok, D, DP, 1.f);

  float row_lse[kRowsPerWarp], row_delta[kRowsPerWarp], dq[kRowsPerWarp][NR];
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    const int i = q0 + warp * kRowsPerWarp + rr;
    row_lse[rr] = i < n_tok ? lse_bh[i] : 0.f;
    row_delta[rr] = i < n_tok ? delta_bh[i] : 0.f;
#pragma unroll
    for (int r = 0; r < NR; ++r) dq[rr][r] = 0.f;
  }

  const int q_last = min(q0 + kOwnRows, n_tok) - 1;
  for (int k0 = 0; k0 <= q_last; k0 += kTile) {
    __syncthreads();
    load_rows(Ks, DP + 1, k_base, row3, k0, kTile, n_tok, D, DP, 1.f);
    load_rows(Vs, DP + 1, v_base, row3, k0, kTile, n_tok, D, DP, 1.f);
    __syncthreads();
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; ++rr) {
      const int qi = warp * kRowsPerWarp + rr, i = q0 + qi;
      if (i >= n_tok || k0 > i) continue;  // warp-uniform
      float ds = 0.f;
      if (k0 + lane <= i) {
        const float s = dot(Qs + qi * DP, Ks + lane * (DP + 1), D);
        const float dp = dot(dOs + qi * DP, Vs + lane * (DP + 1), D);
        const float p = expf(s - row_lse[rr]);
        ds = p * (dp - row_delta[rr]);
      }
      const int n_valid = min(kTile, i - k0 + 1);
      for (int jj = 0; jj < n_valid; ++jj) {
        const float dsj = __shfl_sync(kFull, ds, jj);
#pragma unroll
        for (int r = 0; r < NR; ++r) dq[rr][r] = fmaf(dsj, Ks[jj * (DP + 1) + lane + 32 * r], dq[rr][r]);
      }
    }
  }

#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    const int i = q0 + warp * kRowsPerWarp + rr;
    if (i >= n_tok) continue;
    T* dq_row = dqkv + (static_cast<int64_t>(b) * n_tok + i) * row3 + static_cast<int64_t>(h) * D;
#pragma unroll
    for (int r = 0; r < NR; ++r) {
      const int d = lane + 32 * r;
      if (d < D) dq_row[d] = from_float<T>(scale * dq[rr][r]);
    }
  }
}

// ---------- backward: dk, dv ----------
// grid (⌈T/16⌉, Hkv, B), 128 threads; own rows are keys of key/value head g, summed over the query heads
// g·G … g·G + G − 1 (G = H / Hkv) one after the other. Shared: Ks[16][DP], Vs[16][DP] (own keys and
// values), Qs[32][DP+1] (s·q tile), dOs[32][DP+1] (dout tile), lse_t[32], delta_t[32].
// dk_j = Σ_i dS_ij·(s·q_i) already carries the scale through the pre-scaled q.
template <class T, int NR>
__global__ void __launch_bounds__(kThreads)
    attention_backward_dkdv_kernel(T* __restrict__ dqkv, const T* __restrict__ dout, const T* __restrict__ qkv,
                                   const float* __restrict__ lse, const float* __restrict__ delta, int n_tok, int H,
                                   int Hkv, int D, float scale) {
  constexpr int DP = 32 * NR;
  extern __shared__ float smem[];
  float* Ks = smem;
  float* Vs = Ks + kOwnRows * DP;
  float* Qs = Vs + kOwnRows * DP;
  float* dOs = Qs + kTile * (DP + 1);
  float* lse_t = dOs + kTile * (DP + 1);
  float* delta_t = lse_t + kTile;

  const int b = blockIdx.z, g = blockIdx.y, k0 = blockIdx.x * kOwnRows, G = H / Hkv;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row3 = static_cast<int64_t>(H + 2 * Hkv) * D, row1 = static_cast<int64_t>(H) * D;
  const T* tok0 = qkv + static_cast<int64_t>(b) * n_tok * row3;
  const T* k_base = tok0 + static_cast<int64_t>(H + g) * D;
  const T* v_base = k_base + static_cast<int64_t>(Hkv) * D;

  load_rows(Ks, DP, k_base, row3, k0, kOwnRows, n_tok, D, DP, 1.f);
  load_rows(Vs, DP, v_base, row3, k0, kOwnRows, n_tok, D, DP, 1.f);

  float dk[kRowsPerWarp][NR], dv[kRowsPerWarp][NR];
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr)
#pragma unroll
    for (int r = 0; r < NR; ++r) dk[rr][r] = dv[rr][r] = 0.f;

  // The query heads of this group, one after the other; queries i ≥ k0 see these keys, so each head
  // starts at the tile that holds k0 (the loops are uniform across the block: barriers inside).
  const int first_tile = (k0 / kTile) * kTile;
  for (int h = g * G; h < (g + 1) * G; ++h) {
    const T* q_base = tok0 + static_cast<int64_t>(h) * D;
    const T* do_base = dout + static_cast<int64_t>(b) * n_tok * row1 + static_cast<int64_t>(h) * D;
    const float* lse_bh = lse + (static_cast<int64_t>(b) * H + h) * n_tok;
    const float* delta_bh = delta + (static_cast<int64_t>(b) * H + h) * n_tok;
    for (int i0 = first_tile; i0 < n_tok; i0 += kTile) {
      __syncthreads();
      load_rows(Qs, DP + 1, q_base, row3, i0, kTile, n_tok, D, DP, scale);
      load_rows(dOs, DP + 1, do_base, row1, i0, kTile, n_tok, D, DP, 1.f);
      if (threadIdx.x < kTile) {
        const int i = i0 + threadIdx.x;
        lse_t[threadIdx.x] = i < n_tok ? lse_bh[i] : 0.f;
        delta_t[threadIdx.x] = i < n_tok ? delta_bh[i] : 0.f;
      }
      __syncthreads();
#pragma unroll
      for (int rr = 0; rr < kRowsPerWarp; ++rr) {
        const int kj = warp * kRowsPerWarp + rr, j = k0 + kj;
        if (j >= n_tok || i0 + kTile - 1 < j) continue;  // warp-uniform: no query of this tile sees key j
        const int i = i0 + lane;
        float p = 0.f, ds = 0.f;
        if (i >= j && i < n_tok) {
          const float s = dot(Qs + lane * (DP + 1), Ks + kj * DP, D);
          const float dp = dot(dOs + lane * (DP + 1), Vs + kj * DP, D);
          p = expf(s - lse_t[lane]);
          ds = p * (dp - delta_t[lane]);
        }
        const int first = max(0, j - i0), last = min(kTile, n_tok - i0);
        for (int ii = first; ii < last; ++ii) {
          const float pi = __shfl_sync(kFull, p, ii);
          const float dsi = __shfl_sync(kFull, ds, ii);
#pragma unroll
          for (int r = 0; r < NR; ++r) {
            dv[rr][r] = fmaf(pi, dOs[ii * (DP + 1) + lane + 32 * r], dv[rr][r]);
            dk[rr][r] = fmaf(dsi, Qs[ii * (DP + 1) + lane + 32 * r], dk[rr][r]);
          }
        }
      }
    }
  }

#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    const int j = k0 + warp * kRowsPerWarp + rr;
    if (j >= n_tok) continue;
    T* dk_row = dqkv + (static_cast<int64_t>(b) * n_tok + j) * row3 + static_cast<int64_t>(H + g) * D;
    T* dv_row = dk_row + static_cast<int64_t>(Hkv) * D;
#pragma unroll
    for (int r = 0; r < NR; ++r) {
      const int d = lane + 32 * r;
      if (d < D) {
        dk_row[d] = from_float<T>(dk[rr][r]);
        dv_row[d] = from_float<T>(dv[rr][r]);
      }
    }
  }
}

// ---------- launch ----------

size_t forward_smem(int DP) { return sizeof(float) * (kOwnRows * DP + kTile * (DP + 1) + kTile * DP); }
size_t dq_smem(int DP) { return sizeof(float) * (2 * kOwnRows * DP + 2 * kTile * (DP + 1)); }
size_t dkdv_smem(int DP) { return sizeof(float) * (2 * kOwnRows * DP + 2 * kTile * (DP + 1) + 2 * kTile); }

// Kernels past the default 48 KB of dynamic shared memory must opt in (per kernel, per device).
template <class Kernel>
void allow_smem(Kernel kernel, size_t bytes, Device dev, int64_t D) {
  if (bytes <= 48 * 1024) return;
  if (bytes > static_cast<size_t>(max_shared_optin(dev)))
    TETRA_FAIL(Device, "attention (reference): head dim D = ", D, " needs ", bytes,
               " bytes of shared memory per block; ", dev.str(), " allows ", max_shared_optin(dev));
  TETRA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

struct Launch {
  AttentionDims d;
  Device device;
  cudaStream_t stream;
  // One block per 16 rows of one (query or key/value) head: `heads` = H or Hkv.
  dim3 grid(int64_t heads) const {
    return dim3(static_cast<unsigned>((d.T + kOwnRows - 1) / kOwnRows), static_cast<unsigned>(heads),
                static_cast<unsigned>(d.B));
  }
  float scale() const { return 1.0f / std::sqrt(static_cast<float>(d.D)); }
};

template <class T, int NR>
void forward_launch(const Launch& L, Tensor& out, Tensor& lse, const Tensor& qkv) {
  const size_t smem = forward_smem(32 * NR);
  allow_smem(attention_forward_kernel<T, NR>, smem, L.device, L.d.D);
  attention_forward_kernel<T, NR><<<L.grid(L.d.H), kThreads, smem, L.stream>>>(
      static_cast<T*>(out.data_ptr()), lse.data<float>(), static_cast<const T*>(qkv.data_ptr()),
      static_cast<int>(L.d.T), static_cast<int>(L.d.H), static_cast<int>(L.d.Hkv), static_cast<int>(L.d.D),
      L.scale());
  TETRA_CUDA_CHECK_LAUNCH();
}

template <class T, int NR>
void backward_launch(const Launch& L, Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                     const Tensor& lse, float* delta) {
  const int n_tok = static_cast<int>(L.d.T), H = static_cast<int>(L.d.H), Hkv = static_cast<int>(L.d.Hkv),
            D = static_cast<int>(L.d.D);
  const int64_t rows = L.d.B * L.d.T * L.d.H;
  attention_delta_kernel<T><<<static_cast<unsigned>((rows + kWarps - 1) / kWarps), kThreads, 0, L.stream>>>(
      delta, static_cast<const T*>(dout.data_ptr()), static_cast<const T*>(out.data_ptr()),
      static_cast<int>(L.d.B), n_tok, H, D);
  TETRA_CUDA_CHECK_LAUNCH();

  T* dq = static_cast<T*>(dqkv.data_ptr());
  const T* g = static_cast<const T*>(dout.data_ptr());
  const T* x = static_cast<const T*>(qkv.data_ptr());
  const float* l = lse.data<float>();
  const size_t smem_dq = dq_smem(32 * NR), smem_dkdv = dkdv_smem(32 * NR);
  allow_smem(attention_backward_dq_kernel<T, NR>, smem_dq, L.device, L.d.D);
  allow_smem(attention_backward_dkdv_kernel<T, NR>, smem_dkdv, L.device, L.d.D);
  attention_backward_dq_kernel<T, NR>
      <<<L.grid(H), kThreads, smem_dq, L.stream>>>(dq, g, x, l, delta, n_tok, H, Hkv, D, L.scale());
  TETRA_CUDA_CHECK_LAUNCH();
  attention_backward_dkdv_kernel<T, NR>
      <<<L.grid(Hkv), kThreads, smem_dkdv, L.stream>>>(dq, g, x, l, delta, n_tok, H, Hkv, D, L.scale());
  TETRA_CUDA_CHECK_LAUNCH();
}

// Calls f.template operator()<T, NR>() for the tensor type and the head-dim bucket (D ≤ 32·NR).
template <class F>
void dispatch(DType dtype, int64_t D, F&& f) {
  auto by_nr = [&](auto type_tag) {
    using T = decltype(type_tag);
    if (D <= 32) return f.template operator()<T, 1>();
    if (D <= 64) return f.template operator()<T, 2>();
    if (D <= 128) return f.template operator()<T, 4>();
    return f.template operator()<T, 8>();
  };
  if (dtype == DType::F32) return by_nr(float{});
  return by_nr(__nv_bfloat16{});
}

// Device scratch from the stream-ordered pool (no cudaMalloc in steady state), released in stream
// order when it goes out of scope, also when a launch throws.
class Scratch {
 public:
  Scratch(size_t bytes, Device dev) : bytes_(bytes), dev_(dev), ptr_(allocate(bytes, dev)) {}
  ~Scratch() { release(ptr_, bytes_, dev_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  float* floats() const { return static_cast<float*>(ptr_); }

 private:
  size_t bytes_;
  Device dev_;
  void* ptr_;
};

// With the tensors' device current (DeviceScope held by the caller).
Launch prepare(const char* op, const AttentionDims& d, const Tensor& qkv) {
  if (d.D > kMaxHeadDim)
    TETRA_FAIL(Device, op, ": head dim D = ", d.D, " is above the reference kernels' limit of ", kMaxHeadDim);
  if (d.T > (1LL << 30) || d.B > 65535 || d.H > 65535)
    TETRA_FAIL(Device, op, ": ", qkv.describe(), " is beyond the reference kernels' grid (B, H ≤ 65535)");
  return Launch{d, qkv.device(), stream_of(qkv.device())};
}

}  // namespace

void attention_forward_reference(Tensor& out, Tensor& lse, const Tensor& qkv, int64_t n_heads, int64_t n_kv_heads) {
  const char* op = "attention_forward (reference)";
  const AttentionDims d = check_attention_forward(op, out, lse, qkv, n_heads, n_kv_heads);
  if (d.B == 0 || d.T == 0) return;
  const DeviceScope scope(qkv.device());
  const Launch L = prepare(op, d, qkv);
  dispatch(qkv.dtype(), d.D, [&]<class T, int NR>() { forward_launch<T, NR>(L, out, lse, qkv); });
}

void attention_backward_reference(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                                  const Tensor& lse, int64_t n_heads, int64_t n_kv_heads) {
  const char* op = "attention_backward (reference)";
  const AttentionDims d = check_attention_backward(op, dqkv, dout, qkv, out, lse, n_heads, n_kv_heads);
  if (d.B == 0 || d.T == 0) return;
  const DeviceScope scope(qkv.device());
  const Launch L = prepare(op, d, qkv);
  const Scratch delta(static_cast<size_t>(d.B * d.H * d.T) * sizeof(float), qkv.device());  // Δ[B, H, T]
  dispatch(qkv.dtype(), d.D, [&]<class T, int NR>() {
    backward_launch<T, NR>(L, dqkv, dout, qkv, out, lse, delta.floats());
  });
}

}  // namespace tetra::cuda
