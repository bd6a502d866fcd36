// CUDA LayerNorm (torch.nn.functional.layer_norm) and RMSNorm (Hugging Face's LlamaRMSNorm) over the
// last dimension. RMSNorm is LayerNorm without the mean and the bias, so both run the same kernels,
// instantiated per Norm kind (the RMSNorm instantiation drops the mean's row sum, the bias and db):
//   LayerNorm forward   mean = Σx/C,  rstd = 1/√(Σ(x - mean)²/C + eps),  y = (x - mean)·rstd·w + b
//             backward  x̂ = (x - mean)·rstd,  g = dy·w
//                       dx (+)= rstd·(g - mean_C(g) - x̂·mean_C(g·x̂)),  dw += Σ_rows dy·x̂,  db += Σ_rows dy
//   RMSNorm   forward   rstd = 1/√(Σx²/C + eps),  y = x·rstd·w
//             backward  x̂ = x·rstd,  g = dy·w,  dx (+)= rstd·(g - x̂·mean_C(g·x̂)),  dw += Σ_rows dy·x̂
//   with dresidual: dx = dresidual + rstd·(...)  (the residual stream's gradient, fused)
// Shapes: x, y, dx, dy, dresidual [N, C] (any leading dimensions); w, b [C] (dtype P, b optional);
// mean, rstd [N] fp32; dw, db [C] (one dtype, db optional).
// Dtypes: the residual stream's TX (x, dx, dresidual) and the activations' TA (y, dy, and
// dx_rounded: dx rounded to TA in the same pass): TA = TX (both fp32 or both bf16), or TX fp32 with
// TA bf16 (train.residual_dtype fp32: the stream stays fp32, the GEMMs around the norm read bf16).
//
// Row kernels (the fast path: C % 8 == 0, the [N, C] tensors 16-byte aligned; C ≤ 16384 forward,
// ≤ 12288 backward). A team of `team` warps owns a row; thread t of the team owns the 16-byte
// vectors (8 channels each) t, t + 32·team, ... (VPT of them), so every element is read from global
// memory once and written once, with 16-byte accesses. A block runs `slots` teams side by side
// (≈ 8 warps), the grid is one wave of resident blocks striding over the rows, and each thread
// keeps the same channels for all its rows: w (and b) are read once per block into shared memory
// as fp32. Teams of several warps combine their row sums through shared memory (double-buffered,
// one barrier per sum).
//   forward  (VPT ≤ 4, x in registers):   C = 768: team 1, VPT 3 · 1024: 1, 4 · 2048: 2, 4 · 8192: 8, 4
//   backward (VPT ≤ 3, ≤ 128 registers):  C = 768: team 1, VPT 3 · 1024: 2, 2 · 2048: 3, 3 · 8192: 11, 3
// The backward streams: while a thread computes one row, cp.async copies its vectors of the next
// row (dy, x, and dresidual or dx when read) into its own shared-memory staging slots (double
// buffered; it reads back only what it copied, so the staging needs no barrier). A row's loads
// are thus always in flight, independent of the register budget.
// Backward, dw/db without atomics and deterministically: each thread sums dy·x̂ and dy of its
// channels over its rows in registers; at the end the block's slots fold their sums in slot order
// (shared memory) into partial[{dw, db}, block, C] (fp32 scratch from the stream-ordered pool, ≈ 1.6
// MB for 264 blocks at C = 768), and one more kernel adds Σ_block partial, in block order, to dw
// and db. Bytes per row: read x, dy (and dresidual or dx), write dx; the partials add ≈ 3%.
// The optional column sums of dx (dx_column_sum, a projection's bias gradient in a pre-LN model) are
// added per slot into an fp32 [C] row of shared memory as dx is written, and folded the same way.
//
// Fallback kernels (any C, any alignment): one warp per row, V = 8 or element by element, the row
// re-read from L1/L2 for each pass; backward dw/db through per-warp shared-memory sums (2·C fp32
// per warp plus one pad float per 8) folded into the same partials. Their shared memory bounds C
// at about (opt-in shared memory) / 9 bytes: 25K channels on an H100/H200.
// The forward's optional amax (ops.h: the largest |y| as stored, for the FP8 cast of the projection
// y feeds) is folded from the values each thread stores, one atomicMax per block at most
// (block_amax_to), in the row and the fallback kernels alike; the backward's dx_amax (the largest
// |dx|, or |dx_rounded| when that is written, as stored) the same way in the backward kernels.
// In the RMSNorm instantiations mean and b are null and nothing is written for db (its partials have
// one row, dw's).
#include <cuda_pipeline_primitives.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "runtime/cuda/cuda_ops.h"
#include "runtime/cuda/device_context.h"
#include "runtime/cuda/kernel_common.cuh"
#include "runtime/cuda/launch_prepare.h"
#include "runtime/cuda/reduce.h"

namespace tetra::cuda {

namespace {

enum class Norm { Layer, Rms };

// ---------------------------------------------------------------------------------------------
// Row kernels
// ---------------------------------------------------------------------------------------------

// A block holds ≈ kTargetWarps warps (several rows side by side) or one row of up to kMaxTeam warps.
// The backward keeps ≤ 3 vectors per thread: it then fits in 128 registers without spilling (2
// blocks of 8 warps per SM); 4 would spill. The forward holds less per vector and takes 4.
constexpr int kTargetWarps = 8;
constexpr int kMaxTeam = 16;
constexpr int kRowThreads = kMaxTeam * 32;  // launch bound: ≤ 128 registers per thread
constexpr int kForwardMaxVpt = 4;
constexpr int kBackwardMaxVpt = 3;
// The one-stage backward (TETRA_NORM_BACKWARD_STAGES=1) takes blocks of up to this many threads.
constexpr int kOneStageThreads = 256;

// 8 consecutive elements of a row kept in their storage type: one 16-byte word for bf16, two for
// fp32. p must be 16-byte aligned.
template <class T>
struct Pack8;

template <>
struct Pack8<bf16> {
  uint4 u;
  __device__ __forceinline__ void load(const bf16* p) { u = *reinterpret_cast<const uint4*>(p); }
  __device__ __forceinline__ void unpack(float (&f)[8]) const { unpack_bf16x8(u, f); }
};

template <>
struct Pack8<float> {
  float4 a, b;
  __device__ __forceinline__ void load(const float* p) {
    a = reinterpret_cast<const float4*>(p)[0];
    b = reinterpret_cast<const float4*>(p)[1];
  }
  __device__ __forceinline__ void unpack(float (&f)[8]) const { unpack_f32x8(a, b, f); }
};

// 8 fp32 values from 16-byte-aligned shared memory.
__device__ __forceinline__ void load_smem8(const float* p, float (&f)[8]) {
  unpack_f32x8(reinterpret_cast<const float4*>(p)[0], reinterpret_cast<const float4*>(p)[1], f);
}

// Σ v over the team of warps that owns a row (every thread of the team gets it). team == 1: the
// warp's butterfly. team > 1: each warp's sum goes to red[parity][warp], one barrier, then every
// thread adds its team's warps in order. Alternating parity between calls makes one barrier enough:
// a buffer is written again only two calls later, after every thread has passed the barrier of the
// call in between (and so finished reading). All threads of the block must call it together.
__device__ __forceinline__ float team_sum(float v, int team, float (*red)[kMaxTeam], int& parity) {
  v = warp_sum(v);
  if (team == 1) return v;
  const int warp = threadIdx.x / 32;
  if (threadIdx.x % 32 == 0) red[parity][warp] = v;
  __syncthreads();
  const int first = warp / team * team;
  float t = 0.0f;
  for (int k = 0; k < team; ++k) t += red[parity][first + k];
  parity ^= 1;
  return t;
}

// y, mean, rstd for rows slot + k·slots·gridDim.x (k = 0, 1, ...), blockIdx.x·slots first.
// amax (may be null): max |y| bits as stored (ops.h), zeroed before the launch; row_amax (may be
// null, zeroed before the launch): each row's.
// Dynamic shared memory: w, b as fp32 [2][C].
template <Norm K, int VPT, class TX, class TY, class P>
__global__ void __launch_bounds__(kRowThreads)
    norm_forward_rows_kernel(TY* y, float* mean, float* rstd, const TX* x, const P* w, const P* b, int64_t N, int C,
                             float eps, int team, unsigned* amax, unsigned* row_amax) {
  extern __shared__ float4 smem_f4[];
  float* sw = reinterpret_cast<float*>(smem_f4);
  float* sb = sw + C;
  __shared__ float red[2][kMaxTeam];
  const int team_threads = team * 32;
  const int slots = blockDim.x / team_threads;
  const int t = threadIdx.x % team_threads, slot = threadIdx.x / team_threads;
  const int nv = C / 8;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    sw[c] = to_f32(w[c]);
    if constexpr (K == Norm::Layer) sb[c] = b ? to_f32(b[c]) : 0.0f;
  }
  __syncthreads();

  int parity = 0;
  unsigned ymax = 0;
  const float inv_c = 1.0f / static_cast<float>(C);
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * slots; base < N;
       base += static_cast<int64_t>(gridDim.x) * slots) {  // the same trip count for the whole block
    const int64_t row = base + slot;
    const bool active = row < N;
    const TX* xr = x + row * C;
    float v[VPT][8];
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < VPT; ++j) {
      const int vi = t + j * team_threads;
      if (active && vi < nv) {
        Pack8<TX> p;
        p.load(xr + vi * 8);
        p.unpack(v[j]);
#pragma unroll
        for (int k = 0; k < 8; ++k) sum += v[j][k];
      }
    }
    float m = 0.0f;  // RMSNorm: no mean
    if constexpr (K == Norm::Layer) m = team_sum(sum, team, red, parity) * inv_c;
    float sq = 0.0f;
#pragma unroll
    for (int j = 0; j < VPT; ++j) {
      const int vi = t + j * team_threads;
      if (active && vi < nv) {
#pragma unroll
        for (int k = 0; k < 8; ++k) sq += (v[j][k] - m) * (v[j][k] - m);
      }
    }
    const float s = 1.0f / sqrtf(team_sum(sq, team, red, parity) * inv_c + eps);
    if (!active) continue;  // no barrier follows in this iteration
    TY* yr = y + row * C;
    unsigned row_max = 0;
#pragma unroll
    for (int j = 0; j < VPT; ++j) {
      const int vi = t + j * team_threads;
      if (vi < nv) {
        float wv[8], out[8];
        load_smem8(sw + vi * 8, wv);
        if constexpr (K == Norm::Layer) {
          float bv[8];
          load_smem8(sb + vi * 8, bv);
#pragma unroll
          for (int k = 0; k < 8; ++k) out[k] = (v[j][k] - m) * s * wv[k] + bv[k];
        } else {
#pragma unroll
          for (int k = 0; k < 8; ++k) out[k] = v[j][k] * s * wv[k];
        }
        store_vec<8>(yr + vi * 8, out);  // y may alias x (TY = TX): this thread read these elements above
#pragma unroll
        for (int k = 0; k < 8; ++k) row_max = max(row_max, stored_abs_bits<TY>(out[k]));
      }
    }
    ymax = max(ymax, row_max);
    warp_row_amax_to(row_amax, row, row_max);  // (a warp's lanes share a row; a team's warps each add theirs)
    if (t == 0) {
      if constexpr (K == Norm::Layer) mean[row] = m;
      rstd[row] = s;
    }
  }
  block_amax_to(amax, ymax);  // every thread of the block gets here (inactive rows only `continue`)
}

// 16-byte chunks of 8 elements of T: 1 for bf16, 2 for fp32.
template <class T>
constexpr int kChunks = static_cast<int>(sizeof(T)) / 2;

// Starts the asynchronous copy of 8 elements at g (16-byte aligned) into this thread's staging
// chunks s[0], s[stride], ... (cp.async: the data goes to shared memory without passing through
// registers, so a whole row can be in flight while the previous one is computed).
template <class T>
__device__ __forceinline__ void stage_copy(uint4* s, int stride, const T* g) {
#pragma unroll
  for (int q = 0; q < kChunks<T>; ++q)
    __pipeline_memcpy_async(s + q * stride, reinterpret_cast<const uint4*>(g) + q, sizeof(uint4));
}

// The 8 elements a stage_copy of this thread brought in, as fp32 (after __pipeline_wait_prior).
template <class T>
__device__ __forceinline__ void stage_read(const uint4* s, int stride, float (&f)[8]) {
  if constexpr (std::is_same_v<T, bf16>) {
    unpack_bf16x8(s[0], f);
  } else {
    const float4* q = reinterpret_cast<const float4*>(s);
    unpack_f32x8(q[0], q[stride], f);
  }
}

// Raises m to the largest |value| of out[0 … V−1] as the GEMMs of the projection below read dx:
// dx_rounded's (TA) where it is written, else dx's (TX).
template <int V, class TA, class TX>
__device__ __forceinline__ void fold_dx_amax(unsigned& m, const float (&out)[V], bool rounded) {
  if constexpr (!std::is_same_v<TA, TX>) {
    if (rounded) {
#pragma unroll
      for (int k = 0; k < V; ++k) m = max(m, stored_abs_bits<TA>(out[k]));
      return;
    }
  }
#pragma unroll
  for (int k = 0; k < V; ++k) m = max(m, stored_abs_bits<TX>(out[k]));
}

// A thread's vectors of a row in the backward row kernel: vector j holds elements [8·vi, 8·vi + 8)
// with vi = t + j·team_threads, present while vi < nv (C / 8).
struct RowVectors {
  int t, team_threads, nv;
  __device__ __forceinline__ int index(int j) const { return t + j * team_threads; }
};

// This thread's staging in the backward row kernel: [stage][dy: VPT × kChunks<TA>, x: VPT ×
// kChunks<TX>, and when read dres or dx: VPT × kChunks<TX>][blockDim.x] chunks of 16 bytes; a
// thread's consecutive chunks lie `stride` (blockDim.x) apart, and it reads back only what it copied.
template <int VPT, class TA, class TX>
struct BackwardStaging {
  uint4* base;     // this thread's first chunk of stage 0
  int stride;      // blockDim.x
  int stage_size;  // chunks a stage
  // The first chunk of array a (0: dy, 1: x, 2: dres or dx), vector j, in stage st.
  __device__ __forceinline__ uint4* chunk(int st, int a, int j) const {
    constexpr int kCa = kChunks<TA>, kCx = kChunks<TX>;
    const int at = a == 0 ? j * kCa : VPT * kCa + ((a - 1) * VPT + j) * kCx;
    return base + st * stage_size + at * stride;
  }
  // Starts copying this thread's vectors of row `row` of dy, x and extra (may be null) into stage
  // st (nothing past the last row); one commit group either way.
  __device__ __forceinline__ void issue(int st, const RowVectors& rv, int64_t row, int64_t N, int C, const TA* dy,
                                        const TX* x, const TX* extra) const {
    if (row < N) {
#pragma unroll
      for (int j = 0; j < VPT; ++j) {
        const int vi = rv.index(j);
        if (vi < rv.nv) {
          const int64_t off = row * C + vi * 8;
          stage_copy(chunk(st, 0, j), stride, dy + off);
          stage_copy(chunk(st, 1, j), stride, x + off);
          if (extra) stage_copy(chunk(st, 2, j), stride, extra + off);
        }
      }
    }
    __pipeline_commit();
  }
};

// Pass 1 of the backward over a staged row: this thread's parts of Σ g and Σ g·x̂ (g = dy·w,
// x̂ = (x − m)·s), and its dw += dy·x̂ and (LayerNorm) db += dy sums.
template <bool kMean, int VPT, class TA, class TX>
__device__ __forceinline__ void backward_row_sums(const BackwardStaging<VPT, TA, TX>& sg, int st, const RowVectors& rv,
                                                  const float* sw, float m, float s, bool active, float& g_sum,
                                                  float& gx_sum, float (&dw_acc)[VPT][8], float (&db_acc)[VPT][8]) {
#pragma unroll
  for (int j = 0; j < VPT; ++j) {
    const int vi = rv.index(j);
    if (active && vi < rv.nv) {
      float dv[8], xv[8], wv[8];
      stage_read<TA>(sg.chunk(st, 0, j), sg.stride, dv);
      stage_read<TX>(sg.chunk(st, 1, j), sg.stride, xv);
      load_smem8(sw + vi * 8, wv);
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        const float xh = (xv[k] - m) * s;
        const float g = dv[k] * wv[k];
        g_sum += g;
        gx_sum += g * xh;
        dw_acc[j][k] += dv[k] * xh;
        if constexpr (kMean) db_acc[j][k] += dv[k];
      }
    }
  }
}

// Adds out[0 … 7], rounded to TX as dx stores them, to the fp32 sums d[0 … 7] (16-byte aligned).
template <class TX>
__device__ __forceinline__ void add_as_stored(float* d, const float (&out)[8]) {
  float4* q = reinterpret_cast<float4*>(d);
  float4 a = q[0], b = q[1];
  a.x += to_f32(from_f32<TX>(out[0]));
  a.y += to_f32(from_f32<TX>(out[1]));
  a.z += to_f32(from_f32<TX>(out[2]));
  a.w += to_f32(from_f32<TX>(out[3]));
  b.x += to_f32(from_f32<TX>(out[4]));
  b.y += to_f32(from_f32<TX>(out[5]));
  b.z += to_f32(from_f32<TX>(out[6]));
  b.w += to_f32(from_f32<TX>(out[7]));
  q[0] = a;
  q[1] = b;
}

// Pass 2 over a staged row: dx = s·(dy·w − g_mean − x̂·gx_mean), plus the third array when staged
// (extra), stored to dxr [C] and, TA ≠ TX only, rounded to dxr_rounded [C] (may be null); with
// sum_dx, added as stored to this slot's dx sums sdx [C]. dx may alias dy or dres: all were staged
// before. Returns the row's largest |dx| bits as the projection below reads them (0 unless
// want_amax).
template <int VPT, class TA, class TX>
__device__ __forceinline__ unsigned backward_row_dx(const BackwardStaging<VPT, TA, TX>& sg, int st,
                                                    const RowVectors& rv, const float* sw, float m, float s,
                                                    float g_mean, float gx_mean, bool extra, TX* dxr,
                                                    TA* dxr_rounded, bool want_amax, bool sum_dx, float* sdx) {
  unsigned row_max = 0;
#pragma unroll
  for (int j = 0; j < VPT; ++j) {
    const int vi = rv.index(j);
    if (vi < rv.nv) {
      float dv[8], xv[8], wv[8], out[8];
      stage_read<TA>(sg.chunk(st, 0, j), sg.stride, dv);
      stage_read<TX>(sg.chunk(st, 1, j), sg.stride, xv);
      load_smem8(sw + vi * 8, wv);
      if (extra) {
        stage_read<TX>(sg.chunk(st, 2, j), sg.stride, out);
      } else {
#pragma unroll
        for (int k = 0; k < 8; ++k) out[k] = 0.0f;
      }
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        const float xh = (xv[k] - m) * s;
        out[k] += s * (dv[k] * wv[k] - g_mean - xh * gx_mean);
      }
      store_vec<8>(dxr + vi * 8, out);
      if constexpr (!std::is_same_v<TA, TX>) {
        if (dxr_rounded) store_vec<8>(dxr_rounded + vi * 8, out);
      }
      if (want_amax) fold_dx_amax<8, TA, TX>(row_max, out, dxr_rounded != nullptr);
      if (sum_dx) add_as_stored<TX>(sdx + vi * 8, out);
    }
  }
  return row_max;
}

// The block's column sums of dx into out_dx [C]: each thread wrote only its own channels of its
// slot's row of slot0 [slots][C]; the slots are folded in order (after a barrier when there are
// several).
template <int VPT>
__device__ __forceinline__ void write_dx_sums(float* out_dx, const float* slot0, int slots, int C,
                                              const RowVectors& rv) {
  if (slots == 1) {
#pragma unroll
    for (int j = 0; j < VPT; ++j) {
      const int vi = rv.index(j);
      if (vi < rv.nv)
#pragma unroll
        for (int k = 0; k < 8; ++k) out_dx[vi * 8 + k] = slot0[vi * 8 + k];
    }
    return;
  }
  __syncthreads();
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float v = 0.0f;
    for (int sl = 0; sl < slots; ++sl) v += slot0[sl * C + c];
    out_dx[c] = v;
  }
}

// The block's dw [C] and (LayerNorm) db [C]: the slots own the same channels, so their sums are
// folded in slot order through fold [2][C] when there are several.
template <bool kMean, int VPT>
__device__ __forceinline__ void write_dw_db(float* out_dw, float* out_db, float* fold, const float (&dw_acc)[VPT][8],
                                            const float (&db_acc)[VPT][8], int slot, int slots, int C,
                                            const RowVectors& rv) {
  if (slots == 1) {
#pragma unroll
    for (int j = 0; j < VPT; ++j) {
      const int vi = rv.index(j);
      if (vi < rv.nv) {
#pragma unroll
        for (int k = 0; k < 8; ++k) {
          out_dw[vi * 8 + k] = dw_acc[j][k];
          if constexpr (kMean) out_db[vi * 8 + k] = db_acc[j][k];
        }
      }
    }
    return;
  }
  for (int sl = 0; sl < slots; ++sl) {
    if (slot == sl) {
#pragma unroll
      for (int j = 0; j < VPT; ++j) {
        const int vi = rv.index(j);
        if (vi < rv.nv) {
#pragma unroll
          for (int k = 0; k < 8; ++k) {
            const int c = vi * 8 + k;
            fold[c] = sl == 0 ? dw_acc[j][k] : fold[c] + dw_acc[j][k];
            if constexpr (kMean) fold[C + c] = sl == 0 ? db_acc[j][k] : fold[C + c] + db_acc[j][k];
          }
        }
      }
    }
    __syncthreads();
  }
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    out_dw[c] = fold[c];
    if constexpr (kMean) out_db[c] = fold[C + c];
  }
}

// dx for rows slot + k·slots·gridDim.x; the block's dw/db sums go to partial[0, blockIdx.x, :] and
// partial[1, blockIdx.x, :]. dres (may be null) is added to dx; with accumulate, dx is added to.
// dx_rounded (TA ≠ TX only; may be null) receives dx rounded to TA. amax (may be null, zeroed
// before the launch): the largest |dx| bits (|dx_rounded| where written) as stored; row_amax (may
// be null, zeroed before the launch): each row's.
// With sum_dx, the block's column sums of dx (of the values stored, after rounding to TX) go to
// partial[2, blockIdx.x, :]: each slot adds its rows into its own fp32 [C] row of shared memory
// (each thread to its own channels, so without atomics), folded in slot order at the end.
// STAGES 2: each thread stages its own vectors of the next row (dy, x, and dres or dx when read)
// into shared memory with cp.async while it computes the current row, double-buffered, and reads
// back only what it copied itself (so no barrier is needed for the staging). STAGES 1: a thread
// stages the row it is about to compute and waits for it; half the staging, so three blocks of up to
// 256 threads fit an SM (launch bound 3: ≤ 80 registers), and the other warps hide the wait.
// Dynamic shared memory: the staging (BackwardStaging) of STAGES stages, then w as fp32 [C], then,
// when slots > 1, the slot fold [2][C], then, with sum_dx, the dx sums [slots][C].
template <Norm K, int VPT, class TA, class TX, class P, int STAGES>
__global__ void __launch_bounds__(STAGES == 1 ? kOneStageThreads : kRowThreads, STAGES == 1 ? 3 : 1)
    norm_backward_rows_kernel(TX* dx, TA* dx_rounded, float* partial, const TA* dy, const TX* x, const P* w,
                              const float* mean, const float* rstd, const TX* dres, int64_t N, int C, int team,
                              bool accumulate, bool sum_dx, unsigned* amax, unsigned* row_amax) {
  extern __shared__ float4 smem_f4[];
  __shared__ float red[2][kMaxTeam];
  const int team_threads = team * 32;
  const int slots = blockDim.x / team_threads;
  const int slot = threadIdx.x / team_threads;
  const RowVectors rv{static_cast<int>(threadIdx.x) % team_threads, team_threads, C / 8};
  const TX* extra = dres ? dres : (accumulate ? dx : nullptr);  // the third array, if any
  const int arrays = extra ? 3 : 2;
  const int stride = blockDim.x;
  const int stage_size = VPT * (kChunks<TA> + (arrays - 1) * kChunks<TX>) * stride;  // chunks per stage
  uint4* staging = reinterpret_cast<uint4*>(smem_f4);
  const BackwardStaging<VPT, TA, TX> sg{staging + threadIdx.x, stride, stage_size};
  float* sw = reinterpret_cast<float*>(staging + STAGES * stage_size);
  float* fold = sw + C;  // [2][C], when slots > 1
  float* sdx = fold + (slots > 1 ? 2 * C : 0) + slot * C;  // this slot's dx sums [C], with sum_dx

  const int64_t step = static_cast<int64_t>(gridDim.x) * slots;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * slots + slot;
  if constexpr (STAGES == 2) sg.issue(0, rv, first, N, C, dy, x, extra);
  for (int c = threadIdx.x; c < C; c += blockDim.x) sw[c] = to_f32(w[c]);
  __syncthreads();

  float dw_acc[VPT][8], db_acc[VPT][8];
#pragma unroll
  for (int j = 0; j < VPT; ++j)
#pragma unroll
    for (int k = 0; k < 8; ++k) dw_acc[j][k] = db_acc[j][k] = 0.0f;
  if (sum_dx) {
#pragma unroll
    for (int j = 0; j < VPT; ++j) {
      const int vi = rv.index(j);
      if (vi < rv.nv) {
        float4* d = reinterpret_cast<float4*>(sdx + vi * 8);
        d[0] = d[1] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
    }
  }

  int parity = 0, st = 0;
  unsigned dmax = 0;
  constexpr bool kMean = K == Norm::Layer;  // RMSNorm: mean is null, m = 0
  float m_next = kMean && first < N ? mean[first] : 0.0f, s_next = first < N ? rstd[first] : 0.0f;
  const float inv_c = 1.0f / static_cast<float>(C);
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * slots; base < N; base += step, st ^= STAGES - 1) {
    // The same trip count for the whole block (team_sum has barriers).
    const int64_t row = base + slot;
    const bool active = row < N;
    const float m = m_next, s = s_next;
    // Two stages: the next row streams in while this one is computed. One: this row, into the slots
    // the previous row was read from (this thread's own reads, all consumed by the stores above).
    sg.issue(STAGES == 2 ? st ^ 1 : 0, rv, STAGES == 2 ? row + step : row, N, C, dy, x, extra);
    if (row + step < N) {
      if constexpr (kMean) m_next = mean[row + step];
      s_next = rstd[row + step];
    }
    __pipeline_wait_prior(STAGES - 1);  // this row's group has landed

    float g_sum = 0.0f, gx_sum = 0.0f;
    backward_row_sums<kMean>(sg, st, rv, sw, m, s, active, g_sum, gx_sum, dw_acc, db_acc);
    float g_mean = 0.0f;  // RMSNorm: the mean's term is absent
    if constexpr (kMean) g_mean = team_sum(g_sum, team, red, parity) * inv_c;
    const float gx_mean = team_sum(gx_sum, team, red, parity) * inv_c;
    if (!active) continue;  // no barrier follows in this iteration
    const unsigned row_max =
        backward_row_dx(sg, st, rv, sw, m, s, g_mean, gx_mean, extra != nullptr, dx + row * C,
                        dx_rounded ? dx_rounded + row * C : nullptr, amax || row_amax, sum_dx, sdx);
    dmax = max(dmax, row_max);
    warp_row_amax_to(row_amax, row, row_max);  // (a warp's lanes share a row; a team's warps each add theirs)
  }
  __pipeline_wait_prior(0);  // (two stages) the last group staged nothing, but leave no copy outstanding
  block_amax_to(amax, dmax);  // every thread of the block gets here (inactive rows only `continue`)

  float* out_dw = partial + static_cast<int64_t>(blockIdx.x) * C;
  float* out_db = partial + (static_cast<int64_t>(gridDim.x) + blockIdx.x) * C;  // LayerNorm only
  float* out_dx = partial + (2 * static_cast<int64_t>(gridDim.x) + blockIdx.x) * C;
  if (sum_dx) write_dx_sums<VPT>(out_dx, sdx - slot * C, slots, C, rv);
  write_dw_db<kMean>(out_dw, out_db, fold, dw_acc, db_acc, slot, slots, C, rv);
}

// Dynamic shared memory of the backward row kernel (see its comment): dy's elements of act_size
// bytes, x's (and the third array's) of stream_size.
size_t backward_rows_smem(int stages, int vpt, int threads, int slots, int C, size_t act_size, size_t stream_size,
                          bool third_array, bool sum_dx) {
  const size_t chunks = act_size / 2 + (third_array ? 2 : 1) * (stream_size / 2);  // per vector
  const size_t staging = size_t(stages) * size_t(vpt) * chunks * threads * 16;
  return staging + size_t(C) * sizeof(float) * ((slots > 1 ? 3 : 1) + (sum_dx ? slots : 0));
}

// The backward row kernel's staging: TETRA_NORM_BACKWARD_STAGES = 2 (unset: the default) or 1 (see
// norm_backward_rows_kernel), read at every call so that one process can run both.
int norm_backward_stages() {
  const char* v = std::getenv("TETRA_NORM_BACKWARD_STAGES");
  if (!v || !*v || std::strcmp(v, "2") == 0) return 2;
  if (std::strcmp(v, "1") == 0) return 1;
  TETRA_FAIL(Config, "TETRA_NORM_BACKWARD_STAGES='", v, "' is not a staging depth of the norm backward: use 2 (",
             "the next row staged while one is computed, the default) or 1 (the row being computed only)");
}

// How a row of C channels (C % 8 == 0) maps onto the row kernels: the fewest warps per row that
// keep each thread at ≤ max_vpt vectors; vpt == 0 when C does not fit (or C % 8 != 0).
struct RowLayout {
  int vpt = 0, team = 0, slots = 0, threads = 0;
};

RowLayout row_layout(int C, int max_vpt) {
  RowLayout l;
  const int nv = C / 8;
  const int team = (nv + 32 * max_vpt - 1) / (32 * max_vpt);
  if (C % 8 != 0 || team > kMaxTeam) return l;
  l.team = team;
  l.vpt = (nv + 32 * team - 1) / (32 * team);
  l.slots = std::max(1, kTargetWarps / team);
  l.threads = l.slots * team * 32;
  return l;
}

// The row kernel instantiation for a VPT chosen at run time (1 ≤ vpt ≤ MaxVpt ≤ 4).
template <template <Norm, int, class, class, class> class Pick, Norm K, int MaxVpt, class T1, class T2, class P>
auto row_kernel(int vpt) {
  static_assert(MaxVpt == 3 || MaxVpt == 4);
  if constexpr (MaxVpt == 4) {
    if (vpt == 4) return Pick<K, 4, T1, T2, P>::get();
  }
  switch (vpt) {
    case 1: return Pick<K, 1, T1, T2, P>::get();
    case 2: return Pick<K, 2, T1, T2, P>::get();
    default: return Pick<K, 3, T1, T2, P>::get();
  }
}
template <Norm K, int VPT, class TX, class TY, class P>
struct PickForward {
  static auto get() { return norm_forward_rows_kernel<K, VPT, TX, TY, P>; }
};
template <int STAGES>
struct PickBackward {
  template <Norm K, int VPT, class TA, class TX, class P>
  struct Pick {
    static auto get() { return norm_backward_rows_kernel<K, VPT, TA, TX, P, STAGES>; }
  };
};
template <Norm K, int MaxVpt, class TA, class TX, class P>
auto backward_row_kernel(int stages, int vpt) {
  return stages == 1 ? row_kernel<PickBackward<1>::Pick, K, MaxVpt, TA, TX, P>(vpt)
                     : row_kernel<PickBackward<2>::Pick, K, MaxVpt, TA, TX, P>(vpt);
}

// ---------------------------------------------------------------------------------------------
// Fallback kernels (any C, any alignment)
// ---------------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------------
// Weight gradients: dw[c] += Σ_b partial[0, b, c], db[c] += Σ_b partial[1, b, c], b in block order,
// and the column sums of dx: dx_sum[c] = Σ_b partial[2, b, c].
// Grid (⌈C/32⌉, 1, 2 or 3): blockIdx.y picks dw, db or dx_sum (db may be null). Block (32, 16): 32 consecutive channels
// (coalesced) × 16 lanes over the partial rows, folded in shared memory in lane order.
// ---------------------------------------------------------------------------------------------
constexpr int kFoldRows = 16;

template <class TO>
__global__ void layernorm_weight_grad_kernel(TO* dw, TO* db, float* dx_sum, const float* partial, int blocks,
                                             int C) {
  __shared__ float s[kFoldRows][33];
  if (blockIdx.y == 1 && !db) return;  // (a uniform exit: no barrier is skipped by part of the block)
  const int c = blockIdx.x * 32 + threadIdx.x;
  const float* src = partial + static_cast<int64_t>(blockIdx.y) * blocks * C;
  float acc = 0.0f;
  if (c < C)
    for (int b = threadIdx.y; b < blocks; b += kFoldRows) acc += src[static_cast<int64_t>(b) * C + c];
  s[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float total = 0.0f;
#pragma unroll
    for (int j = 0; j < kFoldRows; ++j) total += s[j][threadIdx.x];
    if (blockIdx.y == 2) {
      dx_sum[c] = total;  // written, not accumulated
    } else {
      TO* out = blockIdx.y == 0 ? dw : db;
      out[c] = from_f32<TO>(to_f32(out[c]) + total);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Host side
// ---------------------------------------------------------------------------------------------

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

// Calls f(TA{}, TX{}) for the (activation, residual stream) dtype pair the kernels are built for:
// one dtype for both, or bf16 activations (y, dy, dx_rounded) beside an fp32 stream (x, dx, dres).
template <class F>
void dispatch_pair(DType act, DType stream, const char* op, const char* act_what, F&& f) {
  if (act == stream) {
    dispatch_float(stream, op, "x", [&](auto t) { f(t, t); });
  } else if (act == DType::BF16 && stream == DType::F32) {
    f(bf16{}, float{});
  } else {
    TETRA_FAIL(Internal, op, ": ", act_what, " is ", dtype_name(act), " but x is ", dtype_name(stream), " (", act_what,
               " must have x's dtype, or be bf16 with an fp32 x)");
  }
}

// An activation-side tensor (y, dy) of x's shape; of another dtype than x's it may not share x's memory.
void check_act(const char* op, const char* what, const Tensor& t, const Tensor& x) {
  check_cuda_float(op, what, t);
  check_shape(op, what, t, x.shape());
  if (t.dtype() != x.dtype()) check_disjoint(op, "x", t, x);
}

// Runs norm K's forward on checked arguments (mean and b: null / undefined for RMSNorm).
template <Norm K>
void norm_forward(const char* op, Tensor& y, float* mean, Tensor& rstd, const Tensor& x, const Tensor& w,
                  const Tensor& b, float eps, Tensor* amax, Tensor* row_amax) {
  const int C = static_cast<int>(w.dim(0));
  const int64_t N = rows_of(x);
  const Device dev = y.device();
  DeviceScope scope(dev);
  cudaStream_t stream = stream_of(dev);
  unsigned* pa = start_amax(op, amax, stream);
  unsigned* pr = start_amax(op, row_amax, stream);
  if (N == 0) return;
  const RowLayout rows = row_layout(C, kForwardMaxVpt);
  const bool rows_path = rows.vpt > 0 && aligned16(x.data_ptr()) && aligned16(y.data_ptr());
  const bool vec = C % 8 == 0 && aligned16(x.data_ptr()) && aligned16(y.data_ptr()) && aligned16(w.data_ptr()) &&
                   (!b.defined() || aligned16(b.data_ptr()));
  dispatch_pair(y.dtype(), x.dtype(), op, "y", [&](auto ty, auto tx) {
    dispatch_float(w.dtype(), op, "w", [&](auto tw) {
      using TX = decltype(tx);
      using TY = decltype(ty);
      using P = decltype(tw);
      TY* py = static_cast<TY*>(y.data_ptr());
      const TX* px = static_cast<const TX*>(x.data_ptr());
      const P* pw = static_cast<const P*>(w.data_ptr());
      const P* pb = b.defined() ? static_cast<const P*>(b.data_ptr()) : nullptr;
      if (rows_path) {
        auto kernel = row_kernel<PickForward, K, kForwardMaxVpt, TX, TY, P>(rows.vpt);
        const size_t smem = size_t{2} * C * sizeof(float);
        const int per_sm =
            static_cast<int64_t>(smem) <= max_shared_optin(dev) ? prepare_launch(kernel, rows.threads, smem, dev) : 0;
        if (per_sm > 0) {
          const int64_t wanted = (N + rows.slots - 1) / rows.slots;
          const int blocks = static_cast<int>(std::min<int64_t>(wanted, int64_t{per_sm} * sm_count(dev)));
          kernel<<<blocks, rows.threads, smem, stream>>>(py, mean, rstd.data<float>(), px, pw, pb, N, C, eps,
                                                         rows.team, pa, pr);
          TETRA_CUDA_CHECK_LAUNCH();
          return;
        }
      }
      const int blocks = static_cast<int>((N + kForwardWarps - 1) / kForwardWarps);
      auto kernel = vec ? norm_forward_kernel<K, 8, TX, TY, P> : norm_forward_kernel<K, 1, TX, TY, P>;
      kernel<<<blocks, kForwardWarps * 32, 0, stream>>>(py, mean, rstd.data<float>(), px, pw, pb, N, C, eps, pa, pr);
      TETRA_CUDA_CHECK_LAUNCH();
    });
  });
}

// The backward's launch: the row kernel (rows_path) or the per-warp fallback; the weight-gradient
// partials are [rows, blocks, C].
struct BackwardLaunch {
  bool rows_path = false;
  bool vec = false;  // the fallback's 8-wide loads (C % 8 == 0, every tensor 16-byte aligned)
  int stages = 2;  // the row kernel's staging buffers (TETRA_NORM_BACKWARD_STAGES)
  RowLayout rows;
  int blocks = 0, threads = 0;
  size_t smem = 0;
};

// Picks the backward's kernel and launch shape. aligned: every row tensor is 16-byte aligned.
template <Norm K>
BackwardLaunch plan_backward(const char* op, const Tensor& dy, const Tensor& x, const Tensor& w, int64_t N,
                             bool aligned, bool wide_staging, bool with_sum) {
  const int C = static_cast<int>(w.dim(0));
  const Device dev = x.device();
  const int64_t optin = max_shared_optin(dev);
  BackwardLaunch l;
  l.vec = C % 8 == 0 && aligned && aligned16(w.data_ptr());
  l.rows = row_layout(C, kBackwardMaxVpt);
  l.stages = norm_backward_stages() == 1 && l.rows.threads <= kOneStageThreads ? 1 : 2;
  dispatch_pair(dy.dtype(), x.dtype(), op, "dy", [&](auto ta, auto tx) {
    dispatch_float(w.dtype(), op, "w", [&](auto tw) {
      using TA = decltype(ta);
      using TX = decltype(tx);
      using P = decltype(tw);
      if (l.rows.vpt <= 0 || !aligned) return;
      auto kernel = backward_row_kernel<K, kBackwardMaxVpt, TA, TX, P>(l.stages, l.rows.vpt);
      l.smem = backward_rows_smem(l.stages, l.rows.vpt, l.rows.threads, l.rows.slots, C, sizeof(TA), sizeof(TX),
                                  wide_staging, with_sum);
      const int per_sm =
          static_cast<int64_t>(l.smem) <= optin ? prepare_launch(kernel, l.rows.threads, l.smem, dev) : 0;
      if (per_sm <= 0) return;
      l.rows_path = true;
      l.threads = l.rows.threads;
      const int64_t wanted = (N + l.rows.slots - 1) / l.rows.slots;
      l.blocks = static_cast<int>(std::min<int64_t>(wanted, int64_t{per_sm} * sm_count(dev)));
    });
  });
  if (l.rows_path) return l;
  const int width = l.vec ? padded_width<8>(C) : padded_width<1>(C);
  const int64_t per_warp = int64_t{2} * width * static_cast<int64_t>(sizeof(float));
  if (per_warp > optin)
    TETRA_FAIL(Device, op, ": C = ", C, " needs ", per_warp, " bytes of shared memory per warp, more than the ",
               optin, " a block may have on ", dev.str());
  // 48 KB without opting in, less 1 KB for the kernel's static shared memory (block_amax_to's
  // per-warp maxima): dynamic + static past 48 KB fails the launch
  const int warps = static_cast<int>(std::clamp<int64_t>((47 * 1024) / per_warp, 1, 8));
  l.threads = warps * 32;
  l.smem = static_cast<size_t>(warps * per_warp);
  l.blocks = static_cast<int>(std::clamp<int64_t>((N + warps - 1) / warps, 1, 4 * sm_count(dev)));
  return l;
}

// Runs norm K's backward on checked arguments (mean: null, db undefined, dx_column_sum null for
// RMSNorm). Weight gradients always accumulate: dw += Σ_block partial[0], db += Σ_block partial[1].
template <Norm K>
void norm_backward(const char* op, Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dy, const Tensor& x,
                   const Tensor& w, const float* mean, const Tensor& rstd, bool accumulate_dx,
                   const Tensor* dresidual, Tensor* dx_column_sum, Tensor* dx_rounded, Tensor* dx_amax,
                   Tensor* dx_row_amax) {
  const int C = static_cast<int>(w.dim(0));
  const bool with_db = db.defined(), with_res = given(dresidual), with_sum = given(dx_column_sum);
  const bool with_rounded = given(dx_rounded);
  const int64_t N = rows_of(x);
  const Device dev = dx.device();
  DeviceScope scope(dev);
  cudaStream_t stream = stream_of(dev);
  unsigned* pa = start_amax(op, dx_amax, stream);
  unsigned* pr = start_amax(op, dx_row_amax, stream);
  if (N == 0) {
    if (with_sum) zero(*dx_column_sum);
    return;
  }

  const bool aligned = aligned16(x.data_ptr()) && aligned16(dy.data_ptr()) && aligned16(dx.data_ptr()) &&
                       (!with_res || aligned16(dresidual->data_ptr())) &&
                       (!with_rounded || aligned16(dx_rounded->data_ptr()));
  const BackwardLaunch l = plan_backward<K>(op, dy, x, w, N, aligned, with_res || accumulate_dx, with_sum);
  // The row kernel also sums dx (partial row 2); the fallback leaves that to a column sum of dx.
  // RMSNorm has dw's row alone.
  const bool fused_sum = with_sum && l.rows_path;
  const int partial_rows = K == Norm::Rms ? 1 : (fused_sum ? 3 : 2);
  Tensor partial = Tensor::empty({partial_rows, l.blocks, C}, DType::F32, dev);

  dispatch_pair(dy.dtype(), x.dtype(), op, "dy", [&](auto ta, auto tx) {
    dispatch_float(w.dtype(), op, "w", [&](auto tw) {
      using TA = decltype(ta);
      using TX = decltype(tx);
      using P = decltype(tw);
      TX* pdx = static_cast<TX*>(dx.data_ptr());
      TA* prounded = with_rounded ? static_cast<TA*>(dx_rounded->data_ptr()) : nullptr;
      const TA* pdy = static_cast<const TA*>(dy.data_ptr());
      const TX* px = static_cast<const TX*>(x.data_ptr());
      const P* pw = static_cast<const P*>(w.data_ptr());
      const TX* pres = with_res ? static_cast<const TX*>(dresidual->data_ptr()) : nullptr;
      if (l.rows_path) {
        auto kernel = backward_row_kernel<K, kBackwardMaxVpt, TA, TX, P>(l.stages, l.rows.vpt);
        kernel<<<l.blocks, l.threads, l.smem, stream>>>(pdx, prounded, partial.data<float>(), pdy, px, pw, mean,
                                                        rstd.data<float>(), pres, N, C, l.rows.team, accumulate_dx,
                                                        fused_sum, pa, pr);
      } else {
        auto kernel = l.vec ? norm_backward_kernel<K, 8, TA, TX, P> : norm_backward_kernel<K, 1, TA, TX, P>;
        if (l.smem > 47 * 1024)
          TETRA_CUDA_CHECK(
              cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(l.smem)));
        kernel<<<l.blocks, l.threads, l.smem, stream>>>(pdx, prounded, partial.data<float>(), pdy, px, pw, mean,
                                                        rstd.data<float>(), pres, N, C, accumulate_dx, pa, pr);
      }
      TETRA_CUDA_CHECK_LAUNCH();
    });
  });
  dispatch_float(dw.dtype(), op, "dw", [&](auto tg) {
    using TG = decltype(tg);
    const dim3 grid(static_cast<unsigned>((C + 31) / 32), fused_sum ? 3u : (with_db ? 2u : 1u));
    layernorm_weight_grad_kernel<TG><<<grid, dim3(32, kFoldRows), 0, stream>>>(
        static_cast<TG*>(dw.data_ptr()), with_db ? static_cast<TG*>(db.data_ptr()) : nullptr,
        fused_sum ? dx_column_sum->data<float>() : nullptr, partial.data<float>(), l.blocks, C);
    TETRA_CUDA_CHECK_LAUNCH();
  });
  if (with_sum && !fused_sum) column_sum(*dx_column_sum, dx, N, C, /*accumulate=*/false);
}

// The checks of dx, dy, dresidual, dx_rounded and dw both backwards share.
void check_backward_args(const char* op, const char* norm, const Tensor& dx, const Tensor& dw, const Tensor& dy,
                         const Tensor& x, int C, bool accumulate_dx, const Tensor* dresidual,
                         const Tensor* dx_rounded) {
  check_cuda_float(op, "x", x);
  check_last_dim(op, "x", x, C);
  check_act(op, "dy", dy, x);
  check_cuda_float(op, "dx", dx);
  check_dtype(op, "dx", dx, x.dtype());
  check_shape(op, "dx", dx, x.shape());
  if (dy.dtype() != dx.dtype()) check_disjoint(op, "dy", dx, dy);  // dx may alias dy of its own dtype only
  check_cuda_float(op, "dw", dw);
  check_shape(op, "dw", dw, {C});
  if (given(dresidual)) {
    if (accumulate_dx)
      TETRA_FAIL(Internal, op, ": accumulate_dx must be false with a dresidual (dx = dresidual + the ", norm,
                 "'s gradient; to add to dx, pass dx itself as dresidual)");
    check_cuda_float(op, "dresidual", *dresidual);
    check_dtype(op, "dresidual", *dresidual, dx.dtype());
    check_shape(op, "dresidual", *dresidual, x.shape());
  }
  if (given(dx_rounded)) {  // dx in dy's dtype: only where that differs from dx's (else a copy of dx)
    check_cuda_float(op, "dx_rounded", *dx_rounded);
    check_dtype(op, "dx_rounded", *dx_rounded, dy.dtype());
    if (dx_rounded->dtype() == dx.dtype())
      TETRA_FAIL(Internal, op, ": dx_rounded ", dx_rounded->describe(),
                 " has dx's dtype: it would be a copy of dx (pass none)");
    check_shape(op, "dx_rounded", *dx_rounded, x.shape());
    check_disjoint(op, "dx", *dx_rounded, dx);
    check_disjoint(op, "dy", *dx_rounded, dy);
    if (given(dresidual)) check_disjoint(op, "dresidual", *dx_rounded, *dresidual);
  }
}

void check_rstd(const char* op, const Tensor& rstd, const Tensor& x) {
  check_cuda_tensor(op, "rstd", rstd);
  check_dtype(op, "rstd", rstd, DType::F32);
  check_shape(op, "rstd", rstd, leading_shape(x));
}

}  // namespace

void layernorm_forward(Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x, const Tensor& w, const Tensor& b,
                       float eps, Tensor* amax) {
  const char* op = "layernorm_forward";
  check_params(op, w, b);
  const int C = channels(op, w.dim(0));
  check_cuda_float(op, "x", x);
  check_last_dim(op, "x", x, C);
  check_act(op, "y", y, x);
  check_stats(op, mean, rstd, x);
  if (!(eps >= 0.0f)) TETRA_FAIL(Internal, op, ": eps must be ≥ 0, got ", eps);
  norm_forward<Norm::Layer>(op, y, mean.data<float>(), rstd, x, w, b, eps, amax, nullptr);
}

void layernorm_backward(Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dy, const Tensor& x, const Tensor& w,
                        const Tensor& mean, const Tensor& rstd, bool accumulate_dx, const Tensor* dresidual,
                        Tensor* dx_column_sum, Tensor* dx_rounded, Tensor* dx_amax) {
  const char* op = "layernorm_backward";
  check_params(op, w, Tensor());
  const int C = channels(op, w.dim(0));
  check_backward_args(op, "LayerNorm", dx, dw, dy, x, C, accumulate_dx, dresidual, dx_rounded);
  if (db.defined()) {  // a LayerNorm without bias passes an undefined db
    check_cuda_float(op, "db", db);
    check_dtype(op, "db", db, dw.dtype());
    check_shape(op, "db", db, {C});
  }
  check_stats(op, mean, rstd, x);
  if (given(dx_column_sum)) {
    check_cuda_tensor(op, "dx_column_sum", *dx_column_sum);
    check_dtype(op, "dx_column_sum", *dx_column_sum, DType::F32);
    check_shape(op, "dx_column_sum", *dx_column_sum, {C});
  }
  norm_backward<Norm::Layer>(op, dx, dw, db, dy, x, w, mean.data<float>(), rstd, accumulate_dx, dresidual,
                             dx_column_sum, dx_rounded, dx_amax, nullptr);
}

void rmsnorm_forward(Tensor& y, Tensor& rstd, const Tensor& x, const Tensor& w, float eps, Tensor* amax,
                     Tensor* row_amax) {
  const char* op = "rmsnorm_forward";
  check_params(op, w, Tensor());
  const int C = channels(op, w.dim(0));
  check_cuda_float(op, "x", x);
  check_last_dim(op, "x", x, C);
  check_act(op, "y", y, x);
  check_rstd(op, rstd, x);
  if (!(eps >= 0.0f)) TETRA_FAIL(Internal, op, ": eps must be ≥ 0, got ", eps);
  norm_forward<Norm::Rms>(op, y, nullptr, rstd, x, w, Tensor(), eps, amax, row_amax);
}

void rmsnorm_backward(Tensor& dx, Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                      bool accumulate_dx, const Tensor* dresidual, Tensor* dx_rounded, Tensor* dx_amax,
                      Tensor* dx_row_amax) {
  const char* op = "rmsnorm_backward";
  check_params(op, w, Tensor());
  const int C = channels(op, w.dim(0));
  check_backward_args(op, "RMSNorm", dx, dw, dy, x, C, accumulate_dx, dresidual, dx_rounded);
  check_rstd(op, rstd, x);
  Tensor no_db;
  norm_backward<Norm::Rms>(op, dx, dw, no_db, dy, x, w, nullptr, rstd, accumulate_dx, dresidual, nullptr,
                           dx_rounded, dx_amax, dx_row_amax);
}

}  // namespace tetra::cuda
