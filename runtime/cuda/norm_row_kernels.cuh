// The norms' row kernels: the fast path of runtime/cuda/norm.cu, whose comment gives the formulas,
// shapes and dtypes; included only there (the anonymous namespace keeps them private to it).
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
#pragma once

#include <cuda_pipeline_primitives.h>

#include <type_traits>

#include "runtime/cuda/kernel_common.cuh"
#include "runtime/cuda/norm_common.cuh"

namespace tetra::cuda {
namespace {

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

}  // namespace
}  // namespace tetra::cuda
