// The per-expert casts of the grouped FP8 expert GEMMs (runtime/cuda/moe_grouped_fp8_cast.h),
// Tensorwise, the CPU twin's (runtime/cpu/moe_grouped_linear.cpp) codes and scales bit for bit:
//   1. amax: each block takes up to kRows rows of one expert (the row tensors: the grouped GEMMs'
//      tile list, runtime/cuda/moe_grouped_tiles.cuh; the weights: blockIdx.y the expert), folds the
//      bits of |x| (block_amax_to: one atomicMax per block) into amax[g];
//   2. scales: s[g] = 1 / fp8_quant_factor(amax[g]) for every expert (empty ones too: a weight
//      gradient of an expert without rows multiplies its zero sums by a finite scale);
//   3. codes: fp8(x·r[g]), either by the same blocks into a code tensor of x's shape, or transposed
//      (the tensor-core kernel's layouts): with vectors, 8 × 8 pieces transposed in each thread's
//      registers (and the row codes written in the same pass where both layouts are asked for);
//      element by element, 64 × 64 tiles through shared memory.
// Passes 1 and 3 move 8 elements a load where the columns allow (cols a multiple of 8, x 16-byte
// aligned: every shape the models run), one element otherwise.
// moe_permute_fp8_cast's rows, gathered from the tokens they copy, take pass 1 over the tokens and,
// by default, pass 3 token by token into the row codes, then a transposing pass over the codes
// (GatheredCast in the header).
#include <cstdlib>
#include <string>
#include <vector>

#include "runtime/cuda/moe_grouped_fp8_cast.h"

#include "runtime/cuda/cuda_ops.h"
#include "runtime/cuda/device_context.h"
#include "runtime/cuda/fp8_device.cuh"
#include "runtime/cuda/kernel_common.cuh"
#include "runtime/cuda/moe_grouped_tiles.cuh"

namespace tetra::cuda {

namespace {

constexpr int kRows = 16, kThreads = 256;

struct Span {
  int g;
  int64_t begin, end;  // rows [begin, end) of expert g
  bool valid;
};

// This block's rows (every thread gets the same; locate_tile synchronises the block).
__device__ Span block_span(const Segments& s) {
  if (!s.offsets) {
    const int g = blockIdx.y;
    const int64_t begin = g * s.O + int64_t{blockIdx.x} * kRows, end = min(begin + kRows, (g + 1) * s.O);
    return {g, begin, end, begin < end};
  }
  const TileAt t = locate_tile<GroupedGemmKind::Forward, kRows>(s.offsets, s.G, s.R, 0, 1, nullptr);
  if (!t.valid) return {0, 0, 0, false};
  int64_t r0, r1;
  group_rows(s.offsets, t.g, s.R, &r0, &r1);
  const int64_t begin = r0 + t.m_tile * kRows;
  return {t.g, begin, min(begin + kRows, r1), true};
}

template <class T>
__global__ void __launch_bounds__(kThreads) segment_amax_kernel(const T* __restrict__ x, Segments s, unsigned* amax) {
  const Span sp = block_span(s);
  if (!sp.valid) return;  // the whole block
  unsigned m = 0;
  for (int64_t i = sp.begin * s.cols + threadIdx.x; i < sp.end * s.cols; i += kThreads)
    m = max(m, abs_bits(to_f32(x[i])));
  block_amax_to(amax + sp.g, m);
}

// The row of x that row r of the segments reads (Segments::gather).
__device__ __forceinline__ int64_t source_row(const Segments& s, int64_t r) {
  return s.gather ? s.gather[r] / s.top_k : r;
}

// amax[g] = the largest of row_amax over expert g's rows [offsets[g], offsets[g + 1]), clamped to
// [0, R] as group_rows clamps them (through the gather: over the tokens they read): one block an
// expert, its threads striding over the rows (a few µs: 4 bytes a row). With row weights
// (Segments::row_weight) a row's amax is its token's times |w|, rounded to T as the scaled rows are:
// the largest |w·x| as stored, since a product with a fixed |w| and the rounding both keep the order
// of magnitudes.
template <class T>
__global__ void __launch_bounds__(kThreads) segment_row_amax_kernel(const unsigned* __restrict__ row_amax, Segments s,
                                                                    unsigned* amax) {
  const int g = blockIdx.x;
  int64_t r0, r1;
  group_rows(s.offsets, g, s.R, &r0, &r1);
  unsigned m = 0;
  for (int64_t r = r0 + threadIdx.x; r < r1; r += kThreads) {
    const unsigned a = row_amax[source_row(s, r)];
    m = max(m, s.row_weight ? stored_abs_bits<T>(fabsf(s.row_weight[s.gather[r]]) * __uint_as_float(a)) : a);
  }
  block_amax_to(amax + g, m);
}

// rows[i] = weights[slot_of[i / cols]] · rows[i], rounded to T (scale_gathered_rows); rows whose
// slot_of is no slot of the slots (moe_permute left them zero) stay as they are.
template <class T>
__global__ void __launch_bounds__(kThreads) scale_rows_kernel(T* rows, const int32_t* __restrict__ slot_of,
                                                              const float* __restrict__ weights, int64_t slots,
                                                              int64_t n, int64_t cols) {
  for (int64_t i = int64_t{blockIdx.x} * kThreads + threadIdx.x; i < n; i += int64_t{gridDim.x} * kThreads) {
    const int32_t slot = slot_of[i / cols];
    if (slot >= 0 && slot < slots) rows[i] = from_f32<T>(weights[slot] * to_f32(rows[i]));
  }
}

// row_amax[n] = the bits of max |x[n, :]| (x [N, cols], cols a multiple of 8, 16-byte aligned): a warp
// a row, 16-byte loads.
template <class T>
__global__ void __launch_bounds__(kThreads) token_amax_kernel(const T* __restrict__ x, int64_t N, int64_t cols,
                                                              unsigned* row_amax) {
  const int64_t row = int64_t{blockIdx.x} * (kThreads / 32) + threadIdx.x / 32;
  if (row >= N) return;  // the whole warp
  unsigned m = 0;
  for (int64_t c = (threadIdx.x % 32) * 8; c < cols; c += 32 * 8) {
    float v[8];
    load_vec<8>(x + row * cols + c, v);
#pragma unroll
    for (int k = 0; k < 8; ++k) m = max(m, abs_bits(v[k]));
  }
  m = __reduce_max_sync(0xffffffffu, m);
  if (threadIdx.x % 32 == 0) row_amax[row] = m;
}

// scale[g] = 1 / r[g], as fp8_quantize writes a Tensorwise scale.
__global__ void segment_scale_kernel(const unsigned* amax, int G, Fp8Format f, float* scale) {
  const int g = blockIdx.x * blockDim.x + threadIdx.x;
  if (g < G) scale[g] = 1.0f / fp8_quant_factor(__uint_as_float(amax[g]), fp8_largest(f));
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    segment_cast_kernel(const T* __restrict__ x, Segments s, const unsigned* amax, Fp8Format f, unsigned char* q) {
  const Span sp = block_span(s);
  if (!sp.valid) return;
  const float r = fp8_quant_factor(__uint_as_float(amax[sp.g]), fp8_largest(f));
  for (int64_t i = sp.begin * s.cols + threadIdx.x; i < sp.end * s.cols; i += kThreads)
    q[i] = fp8_code(to_f32(x[i]), r, f);
}

// q[r, c] = q_t[c, po[g] + r − first row of g] for the rows of each expert g (the row layout of a row
// tensor's codes out of their transposed layout; rows outside every expert are not written).
__global__ void __launch_bounds__(kThreads)
    rows_from_transposed_kernel(const unsigned char* __restrict__ q_t, Segments s, CodeLayout l, unsigned char* q) {
  const Span sp = block_span(s);
  if (!sp.valid) return;
  int64_t first, last;
  group_rows(s.offsets, sp.g, s.R, &first, &last);
  const int64_t po = l.padded_offsets[sp.g];
  for (int64_t i = sp.begin * s.cols + threadIdx.x; i < sp.end * s.cols; i += kThreads)
    q[i] = q_t[(i % s.cols) * l.Rp + po + (i / s.cols - first)];
}

// The same two passes 8 elements at a time (16-byte loads of bf16, 8-byte stores of codes): for
// cols a multiple of 8 and x 16-byte aligned, so that every expert's rows start on a vector. The
// element loops above moved 2 bytes a load and 1 a store, well below what HBM streams.
constexpr int kV = 8;

template <class T>
__global__ void __launch_bounds__(kThreads)
    segment_amax_vec_kernel(const T* __restrict__ x, Segments s, unsigned* amax) {
  const Span sp = block_span(s);
  if (!sp.valid) return;
  unsigned m = 0;
  for (int64_t i = sp.begin * s.cols + int64_t{threadIdx.x} * kV; i < sp.end * s.cols; i += kThreads * kV) {
    float v[kV];
    load_vec<kV>(x + i, v);
#pragma unroll
    for (int j = 0; j < kV; ++j) m = max(m, abs_bits(v[j]));
  }
  block_amax_to(amax + sp.g, m);
}

template <class T>
__global__ void __launch_bounds__(kThreads) segment_cast_vec_kernel(const T* __restrict__ x, Segments s,
                                                                    const unsigned* amax, Fp8Format f,
                                                                    unsigned char* q) {
  const Span sp = block_span(s);
  if (!sp.valid) return;
  const float r = fp8_quant_factor(__uint_as_float(amax[sp.g]), fp8_largest(f));
  for (int64_t i = sp.begin * s.cols + int64_t{threadIdx.x} * kV; i < sp.end * s.cols; i += kThreads * kV) {
    float v[kV];
    load_vec<kV>(x + i, v);
    uint2 codes;
    unsigned char* c = reinterpret_cast<unsigned char*>(&codes);
#pragma unroll
    for (int j = 0; j < kV; ++j) c[j] = fp8_code(v[j], r, f);
    *reinterpret_cast<uint2*>(q + i) = codes;
  }
}

constexpr int kT = 64;  // the element transposing cast: 64 × 64 tiles

// Where a transposing cast's block writes: expert g's source rows [src0, src0 + n) become the
// columns [j0, j0 + 64) ∩ [0, width) of dst (row stride ld), codes past n being zero.
struct TransposedTile {
  int g;
  int64_t src0, n, width, j0;
  unsigned char* dst;
  int64_t ld;
  bool valid;
};

// tile_rows: the source rows a block takes (a divisor of the experts' 128-row padding: 64 for the
// element kernel, CastTile::kRows for the vector one).
__device__ TransposedTile transposed_tile(const Segments& s, const CodeLayout& l, unsigned char* q, int tile_rows) {
  TransposedTile t{};
  if (!s.offsets) {  // w[g] [O, I] → [I, O]
    t.g = blockIdx.z;
    t.src0 = t.g * s.O, t.n = s.O, t.width = s.O, t.j0 = int64_t{blockIdx.y} * tile_rows;
    t.dst = q + t.g * s.cols * s.O, t.ld = s.O;
  } else {
    const int32_t* po = l.padded_offsets;
    const int64_t pos = int64_t{blockIdx.y} * tile_rows;  // po[g] are multiples of 128: one expert per block
    if (pos >= po[s.G]) return t;
    const int g = last_start_at_or_before(po, s.G, pos);
    int64_t r0, r1;
    group_rows(s.offsets, g, s.R, &r0, &r1);
    t.g = g, t.src0 = r0, t.n = r1 - r0, t.width = po[g + 1] - po[g], t.j0 = pos - po[g];
    t.dst = q + po[g], t.ld = l.Rp;
  }
  t.valid = t.j0 < t.width;
  return t;
}

// Codes of a 64 × 64 tile, transposed through shared memory: reads along the source's columns,
// writes along its rows (both coalesced).
template <class T>
__global__ void __launch_bounds__(kThreads) segment_cast_transposed_kernel(const T* __restrict__ x, Segments s,
                                                                           CodeLayout l, const unsigned* amax,
                                                                           Fp8Format f, unsigned char* q) {
  __shared__ unsigned char tile[kT][kT + 4];
  const TransposedTile t = transposed_tile(s, l, q, kT);
  if (!t.valid) return;  // the whole block
  const float r = fp8_quant_factor(__uint_as_float(amax[t.g]), fp8_largest(f));
  const int64_t c0 = int64_t{blockIdx.x} * kT;
  const int tx = threadIdx.x % kT, ty = threadIdx.x / kT;
  for (int i = ty; i < kT; i += kThreads / kT) {
    const int64_t j = t.j0 + i, c = c0 + tx;
    tile[i][tx] = j < t.n && c < s.cols ? fp8_code(to_f32(x[(t.src0 + j) * s.cols + c]), r, f) : 0;
  }
  __syncthreads();
  for (int i = ty; i < kT; i += kThreads / kT) {
    const int64_t c = c0 + i, j = t.j0 + tx;
    if (c < s.cols && j < t.width) t.dst[c * t.ld + j] = tile[tx][i];
  }
}

// Codes of an 8 × 8 byte block transposed in registers: in[p] holds row p's 8 codes (byte k of the
// pair = column k), out[k] column k's (byte p = row p). Four 4 × 4 transposes of 32-bit words.
__device__ __forceinline__ void transpose_8x8(const uint2 (&in)[8], uint2 (&out)[8]) {
  // a[0..3] rows of a 4 × 4 block (byte j = column j) → column j's four bytes.
  auto t4 = [](unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned (&c)[4]) {
    const unsigned t0 = __byte_perm(a0, a1, 0x5140), t1 = __byte_perm(a0, a1, 0x7362);
    const unsigned t2 = __byte_perm(a2, a3, 0x5140), t3 = __byte_perm(a2, a3, 0x7362);
    c[0] = __byte_perm(t0, t2, 0x5410), c[1] = __byte_perm(t0, t2, 0x7632);
    c[2] = __byte_perm(t1, t3, 0x5410), c[3] = __byte_perm(t1, t3, 0x7632);
  };
  unsigned top_lo[4], top_hi[4], bot_lo[4], bot_hi[4];
  t4(in[0].x, in[1].x, in[2].x, in[3].x, top_lo);  // rows 0-3, columns 0-3
  t4(in[0].y, in[1].y, in[2].y, in[3].y, top_hi);  // rows 0-3, columns 4-7
  t4(in[4].x, in[5].x, in[6].x, in[7].x, bot_lo);  // rows 4-7, columns 0-3
  t4(in[4].y, in[5].y, in[6].y, in[7].y, bot_hi);  // rows 4-7, columns 4-7
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    out[k] = make_uint2(top_lo[k], bot_lo[k]);
    out[k + 4] = make_uint2(top_hi[k], bot_hi[k]);
  }
}

// A thread's 8 × 8 codes (codes[p]: source row j + p, columns c..c + 7) stored transposed into the
// tile's destination: 8 codes down each of its 8 destination rows, 8-byte stores where the row stride
// is a multiple of 8 and the codes lie inside the expert's width, else byte by byte.
__device__ __forceinline__ void store_transposed(const TransposedTile& t, int64_t c, int64_t j, const uint2 (&codes)[kV]) {
  uint2 cols[kV];
  transpose_8x8(codes, cols);
  const bool whole = t.ld % kV == 0 && j + kV <= t.width;
#pragma unroll
  for (int k = 0; k < kV; ++k) {
    unsigned char* dst = t.dst + (c + k) * t.ld + j;
    if (whole) {
      *reinterpret_cast<uint2*>(dst) = cols[k];
    } else {
      const unsigned char* b = reinterpret_cast<const unsigned char*>(&cols[k]);
      for (int p = 0; p < kV && j + p < t.width; ++p) dst[p] = b[p];
    }
  }
}

// The transposing cast with vectors, without shared memory: a thread takes 8 source rows × 8
// columns, loaded as 8 vectors (all 8 in flight where the rows exist: a 16-byte load of bf16 each),
// cast, transposed in registers (transpose_8x8) and stored as 8 codes down each of its 8 destination
// rows (8-byte stores where the destination's row stride is a multiple of 8 and the 8 codes lie
// inside the expert's width; else byte by byte). A warp's lanes: kGroups groups of 8 rows
// (lane % kGroups) by 32 / kGroups groups of 8 columns (lane / kGroups); a block of 8 warps side by
// side along the columns. kGroups = 4 (RegTile: 32 rows × 512 columns a block): a warp's loads of one
// source row cover 128 contiguous bytes, its stores of one destination row 32 (a whole sector).
// Measured on one H200 at the 2B MoE's shapes against 64 × 64 tiles through shared memory (2 vectors a
// thread) and against 8, 16 groups: docs/kernels.md, "FP8 training v7". q_rows (may be null): the
// same codes in x's own layout too, so that one pass over x gives both (moe_grouped_fp8_cast). For
// cols a multiple of 8 and x 16-byte aligned, as the vector kernels above. Through a gather
// (Segments::gather) each of a thread's rows comes from its own row of x, and rows_out (may be null)
// receives the rows as read (moe_permute's output, x's type).
template <int kGroups>
struct RegTile {
  static constexpr int kRows = kV * kGroups;                 // source rows a block takes
  static constexpr int kWarpCols = kV * (32 / kGroups);      // columns a warp takes
  static constexpr int kCols = kWarpCols * (kThreads / 32);  // columns a block takes
};
constexpr int kGroups = 4;
using CastTile = RegTile<kGroups>;

// v[k] = w · v[k] in fp32, rounded to T (Segments::row_weight).
template <class T>
__device__ __forceinline__ void scale_rounded(float (&v)[kV], float w) {
#pragma unroll
  for (int k = 0; k < kV; ++k) v[k] = to_f32(from_f32<T>(w * v[k]));
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    segment_cast_transposed_vec_kernel(const T* __restrict__ x, Segments s, CodeLayout l, const unsigned* amax,
                                       Fp8Format f, unsigned char* q, unsigned char* q_rows, T* rows_out) {
  const TransposedTile t = transposed_tile(s, l, q, CastTile::kRows);
  if (!t.valid) return;  // no barrier in this kernel: threads leave as they finish
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t c = int64_t{blockIdx.x} * CastTile::kCols + warp * CastTile::kWarpCols + (lane / kGroups) * kV;
  const int64_t j = t.j0 + (lane % kGroups) * kV;  // the first of its rows, in the expert's (or weight's)
  if (c >= s.cols || j >= t.width) return;
  const float r = fp8_quant_factor(__uint_as_float(amax[t.g]), fp8_largest(f));
  const int64_t r0 = t.src0 + j;  // the segments' row of its first row
  // Its row p in x (read only for rows of the expert: the gather ends with them).
  auto src = [&](int p) { return x + source_row(s, r0 + p) * s.cols + c; };
  float v[kV][kV];
  if (j + kV <= t.n) {
#pragma unroll
    for (int p = 0; p < kV; ++p) load_vec<kV>(src(p), v[p]);
    if (s.row_weight)  // after all 8 loads are issued
#pragma unroll
      for (int p = 0; p < kV; ++p) scale_rounded<T>(v[p], s.row_weight[s.gather[r0 + p]]);
  } else {
#pragma unroll
    for (int p = 0; p < kV; ++p) {
      if (j + p < t.n) {
        load_vec<kV>(src(p), v[p]);
        if (s.row_weight) scale_rounded<T>(v[p], s.row_weight[s.gather[r0 + p]]);
      } else {
#pragma unroll
        for (int k = 0; k < kV; ++k) v[p][k] = 0.0f;
      }
    }
  }
  uint2 codes[kV];
#pragma unroll
  for (int p = 0; p < kV; ++p) {
    codes[p] = make_uint2(0, 0);  // rows past the expert's: zero codes
    unsigned char* b = reinterpret_cast<unsigned char*>(&codes[p]);
    if (j + p < t.n) {
#pragma unroll
      for (int k = 0; k < kV; ++k) b[k] = fp8_code(v[p][k], r, f);
    }
  }
  if (q_rows) {
#pragma unroll
    for (int p = 0; p < kV; ++p)
      if (j + p < t.n) *reinterpret_cast<uint2*>(q_rows + (r0 + p) * s.cols + c) = codes[p];
  }
  if (rows_out) {
#pragma unroll
    for (int p = 0; p < kV; ++p)
      if (j + p < t.n) store_vec<kV>(rows_out + (r0 + p) * s.cols + c, v[p]);  // values of T: stored exactly
  }
  store_transposed(t, c, j, codes);
}

// The gathered cast token by token (GatheredCast::Scatter): x's rows are read once each, in order,
// and each is cast into the rows of its k slots, where the gather above reads every token k times in
// the experts' order. Three passes: the slots' rows and experts; the row codes; their transposes.

// row_of_slot[slot_of[r]] = r and factor_of_slot[slot_of[r]] = expert g's quantisation factor (from
// amax[g]) for each row r of each expert g (one block an expert); slots no row reads keep the -1 they
// were set to.
__global__ void __launch_bounds__(kThreads) slot_rows_kernel(Segments s, int64_t slots, const unsigned* amax,
                                                             Fp8Format f, int32_t* row_of_slot, float* factor_of_slot) {
  const int g = blockIdx.x;
  const float factor = fp8_quant_factor(__uint_as_float(amax[g]), fp8_largest(f));
  int64_t r0, r1;
  group_rows(s.offsets, g, s.R, &r0, &r1);
  for (int64_t r = r0 + threadIdx.x; r < r1; r += kThreads) {
    const int32_t slot = s.gather[r];
    if (slot < 0 || slot >= slots) continue;
    row_of_slot[slot] = static_cast<int32_t>(r);
    factor_of_slot[slot] = factor;
  }
}

// q[row_of_slot[n·k + j], c..c + 7] = the codes of x[n, c..c + 7] (times row_weight[n·k + j], rounded
// to T, where given) at its slot's factor, for each of token n's k slots that a row reads; rows_out
// (may be null) the values as cast. One thread a vector of 8 columns of one token: x [N, cols].
template <class T>
__global__ void __launch_bounds__(kThreads)
    scatter_cast_kernel(const T* __restrict__ x, int64_t N, int64_t cols, int top_k,
                        const int32_t* __restrict__ row_of_slot, const float* __restrict__ factor_of_slot,
                        const float* __restrict__ row_weight, Fp8Format f, unsigned char* __restrict__ q,
                        T* __restrict__ rows_out) {
  const int64_t per_row = cols / kV, items = N * per_row;
  for (int64_t item = int64_t{blockIdx.x} * kThreads + threadIdx.x; item < items;
       item += int64_t{gridDim.x} * kThreads) {
    const int64_t n = item / per_row, c = (item % per_row) * kV;
    float v[kV];
    load_vec<kV>(x + n * cols + c, v);
    for (int j = 0; j < top_k; ++j) {
      const int64_t slot = n * top_k + j;
      const int32_t r = row_of_slot[slot];
      if (r < 0) continue;
      const float factor = factor_of_slot[slot];
      float u[kV];
#pragma unroll
      for (int k = 0; k < kV; ++k) u[k] = v[k];
      if (row_weight) scale_rounded<T>(u, row_weight[slot]);
      uint2 codes;
      unsigned char* b = reinterpret_cast<unsigned char*>(&codes);
#pragma unroll
      for (int k = 0; k < kV; ++k) b[k] = fp8_code(u[k], factor, f);
      *reinterpret_cast<uint2*>(q + r * cols + c) = codes;
      if (rows_out) store_vec<kV>(rows_out + r * cols + c, u);  // values of T: stored exactly
    }
  }
}

// The transposed layout l of a row tensor's codes from their row layout q [R, cols] (cols a multiple
// of 8): the tiles of the transposing cast, each thread 8 rows × 8 codes (8-byte loads), zero codes past
// each expert's rows up to its padded width.
__global__ void __launch_bounds__(kThreads)
    transpose_codes_kernel(const unsigned char* __restrict__ q, Segments s, CodeLayout l, unsigned char* q_t) {
  const TransposedTile t = transposed_tile(s, l, q_t, CastTile::kRows);
  if (!t.valid) return;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t c = int64_t{blockIdx.x} * CastTile::kCols + warp * CastTile::kWarpCols + (lane / kGroups) * kV;
  const int64_t j = t.j0 + (lane % kGroups) * kV;
  if (c >= s.cols || j >= t.width) return;
  uint2 codes[kV];
#pragma unroll
  for (int p = 0; p < kV; ++p)
    codes[p] = j + p < t.n ? *reinterpret_cast<const uint2*>(q + (t.src0 + j + p) * s.cols + c) : make_uint2(0, 0);
  store_transposed(t, c, j, codes);
}

// One warp: po[g + 1] = po[g] + round_up(rows of g, 128), a scan over the experts 32 at a time.
__global__ void padded_offsets_kernel(const int32_t* offsets, int G, int64_t R, int32_t* po) {
  const int lane = threadIdx.x;
  int prefix = 0;
  if (lane == 0) po[0] = 0;
  for (int g0 = 0; g0 < G; g0 += 32) {
    const int g = g0 + lane;
    int v = 0;
    if (g < G) {
      int64_t s, e;
      group_rows(offsets, g, R, &s, &e);
      v = static_cast<int>(fp8_padded_expert_rows(e - s));
    }
    const int incl = warp_inclusive_sum(v);
    if (g < G) po[g + 1] = prefix + incl;
    prefix += __shfl_sync(0xffffffffu, incl, 31);
  }
}

}  // namespace

void scale_gathered_rows(Tensor& rows, const Tensor& slot_of, const Tensor& weights, cudaStream_t stream) {
  const int64_t n = rows.numel(), cols = rows.dim(1);
  if (n == 0) return;
  dispatch_float(rows.dtype(), "scale_gathered_rows", "rows", [&](auto tag) {
    using T = decltype(tag);
    scale_rows_kernel<T><<<grid_size(n, kThreads, rows.device()), kThreads, 0, stream>>>(
        static_cast<T*>(rows.data_ptr()), slot_of.data<int32_t>(), weights.data<float>(), weights.numel(), n, cols);
    TETRA_CUDA_CHECK_LAUNCH();
  });
}

Tensor padded_offsets(const int32_t* offsets, int G, int64_t R, Device dev, cudaStream_t stream) {
  Tensor po = Tensor::empty({G + 1}, DType::I32, dev);
  padded_offsets_kernel<<<1, 32, 0, stream>>>(offsets, G, R, po.data<int32_t>());
  TETRA_CUDA_CHECK_LAUNCH();
  return po;
}

namespace {

dim3 rows_grid(const Segments& s) {
  return s.offsets ? dim3(static_cast<unsigned>((s.R + kRows - 1) / kRows + s.G))
                   : dim3(static_cast<unsigned>((s.O + kRows - 1) / kRows), static_cast<unsigned>(s.G));
}

// A transposing cast's blocks: `cols_per_block` source columns by `tile_rows` source rows each.
// Its rows of blocks are a grid's y (at most 65535): grouped_gemm_fp8_wgmma_applies refuses operands
// with more rows than the shortest tile (32) allows, so that only a direct call can get here with them.
dim3 transposed_grid(const Segments& s, const CodeLayout& l, int tile_rows, int64_t cols_per_block) {
  const int64_t y = s.offsets ? l.Rp / tile_rows : (s.O + tile_rows - 1) / tile_rows;
  TETRA_CHECK(y <= 65535, "moe_grouped_fp8_cast: ", s.offsets ? l.Rp : s.O, " rows to transpose need ", y,
              " rows of blocks of ", tile_rows, "; a grid has at most 65535");
  return dim3(static_cast<unsigned>((s.cols + cols_per_block - 1) / cols_per_block), static_cast<unsigned>(y),
              static_cast<unsigned>(s.offsets ? 1 : s.G));
}

bool nonempty(const dim3& g) { return g.x > 0 && g.y > 0 && g.z > 0; }

// Passes 1 and 2: amax [G] (the bits) and the scales [G] of x's segments; from the amaxes given
// where they are (`given`: a row tensor's per row, the weights' per expert, taken as they are).
template <class T>
Tensor measure(const T* px, bool vec, const Segments& s, Fp8Format f, Tensor& scale, Device dev, cudaStream_t stream,
               const unsigned* given) {
  Tensor amax = Tensor::empty({s.G}, DType::U32, dev);
  unsigned* pa = static_cast<unsigned*>(amax.data_ptr());
  const dim3 grid = rows_grid(s);
  if (given && !s.offsets) {
    TETRA_CUDA_CHECK(cudaMemcpyAsync(pa, given, amax.nbytes(), cudaMemcpyDeviceToDevice, stream));
  } else {
    TETRA_CUDA_CHECK(cudaMemsetAsync(pa, 0, amax.nbytes(), stream));
  }
  if (given && s.offsets && s.G > 0) {
    segment_row_amax_kernel<T><<<s.G, kThreads, 0, stream>>>(given, s, pa);
    TETRA_CUDA_CHECK_LAUNCH();
  } else if (!given && nonempty(grid) && s.cols > 0) {
    if (vec)
      segment_amax_vec_kernel<T><<<grid, kThreads, 0, stream>>>(px, s, pa);
    else
      segment_amax_kernel<T><<<grid, kThreads, 0, stream>>>(px, s, pa);
    TETRA_CUDA_CHECK_LAUNCH();
  }
  segment_scale_kernel<<<(s.G + 127) / 128, 128, 0, stream>>>(pa, s.G, f, scale.data<float>());
  TETRA_CUDA_CHECK_LAUNCH();
  return amax;
}

template <class T>
void cast_rows(const T* px, bool vec, const Segments& s, const unsigned* pa, Fp8Format f, unsigned char* q,
               cudaStream_t stream) {
  const dim3 grid = rows_grid(s);
  if (!nonempty(grid) || s.cols == 0) return;
  if (vec)
    segment_cast_vec_kernel<T><<<grid, kThreads, 0, stream>>>(px, s, pa, f, q);
  else
    segment_cast_kernel<T><<<grid, kThreads, 0, stream>>>(px, s, pa, f, q);
  TETRA_CUDA_CHECK_LAUNCH();
}

// The transposed codes, and with q_rows (vector kernel only) the row codes in the same pass.
template <class T>
void cast_transposed(const T* px, bool vec, const Segments& s, const CodeLayout& l, const unsigned* pa, Fp8Format f,
                     unsigned char* q, unsigned char* q_rows, cudaStream_t stream, T* rows_out = nullptr) {
  if (!vec) {
    const dim3 grid = transposed_grid(s, l, kT, kT);
    if (!nonempty(grid)) return;
    segment_cast_transposed_kernel<T><<<grid, kThreads, 0, stream>>>(px, s, l, pa, f, q);
    TETRA_CUDA_CHECK_LAUNCH();
    return;
  }
  const dim3 grid = transposed_grid(s, l, CastTile::kRows, CastTile::kCols);
  if (!nonempty(grid)) return;
  segment_cast_transposed_vec_kernel<T><<<grid, kThreads, 0, stream>>>(px, s, l, pa, f, q, q_rows, rows_out);
  TETRA_CUDA_CHECK_LAUNCH();
}

std::vector<int64_t> transposed_shape(const Segments& s, const CodeLayout& l) {
  return s.offsets ? std::vector<int64_t>{s.cols, l.Rp} : std::vector<int64_t>{s.G, s.cols, s.O};
}

// Whether x's segments take the 8-wide kernels: every segment starts on a 16-byte vector.
bool vector_ok(const Tensor& x, const Segments& s) {
  return s.cols % kV == 0 && reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 == 0;
}

// x's scales into `scale` and its codes into q (x's layout) and q_t (`transposed`'s), each where
// not null: one amax pass (none where the amaxes are given, as measure takes them), then one pass
// per layout, or one for both with the vector kernels.
void cast_into(const Tensor& x, ops::Fp8Cast c, const Segments& s, const CodeLayout& transposed, unsigned char* q,
               unsigned char* q_t, Tensor& scale, Device dev, cudaStream_t stream, const char* op,
               const unsigned* given_amax = nullptr) {
  const Fp8Format f = fp8_format_of(c.format);
  const bool vec = vector_ok(x, s);
  dispatch_float(x.dtype(), op, "an operand", [&](auto tag) {
    using T = decltype(tag);
    const T* px = static_cast<const T*>(x.data_ptr());
    const Tensor amax = measure(px, vec, s, f, scale, dev, stream, given_amax);
    const unsigned* pa = static_cast<const unsigned*>(amax.data_ptr());
    const bool rows_with_t = q_t && q && vec;  // the transposing kernel writes the row codes too
    if (q_t) cast_transposed(px, vec, s, transposed, pa, f, q_t, rows_with_t ? q : nullptr, stream);
    if (q && !rows_with_t) cast_rows(px, vec, s, pa, f, q, stream);
  });
}

unsigned char* codes_of(const Tensor& t) { return static_cast<unsigned char*>(t.data_ptr()); }

// GatheredCast::Scatter's three passes (the kernels' comments) after the experts' amaxes pa: x [N, cols]
// through s.gather into q [R, cols], q_t in layout l and rows_out (may be null).
template <class T>
void scatter_cast(const T* px, int64_t N, const Segments& s, const CodeLayout& l, const unsigned* pa, Fp8Format f,
                  unsigned char* q, unsigned char* q_t, T* rows_out, Device dev, cudaStream_t stream) {
  const int64_t slots = N * s.top_k;
  if (slots == 0 || s.cols == 0) return;
  Tensor row_of_slot = Tensor::empty({slots}, DType::I32, dev), factor_of_slot = Tensor::empty({slots}, DType::F32, dev);
  TETRA_CUDA_CHECK(cudaMemsetAsync(row_of_slot.data_ptr(), 0xff, row_of_slot.nbytes(), stream));
  if (s.G > 0) {
    slot_rows_kernel<<<s.G, kThreads, 0, stream>>>(s, slots, pa, f, row_of_slot.data<int32_t>(),
                                                   factor_of_slot.data<float>());
    TETRA_CUDA_CHECK_LAUNCH();
  }
  scatter_cast_kernel<T><<<grid_size(N * (s.cols / kV), kThreads, dev), kThreads, 0, stream>>>(
      px, N, s.cols, static_cast<int>(s.top_k), row_of_slot.data<int32_t>(), factor_of_slot.data<float>(),
      s.row_weight, f, q, rows_out);
  TETRA_CUDA_CHECK_LAUNCH();
  const dim3 grid = transposed_grid(s, l, CastTile::kRows, CastTile::kCols);
  if (!nonempty(grid)) return;
  transpose_codes_kernel<<<grid, kThreads, 0, stream>>>(q, s, l, q_t);
  TETRA_CUDA_CHECK_LAUNCH();
}

}  // namespace

ExpertCodes cast_segments(const Tensor& x, ops::Fp8Cast c, const Segments& s, const CodeLayout& layout, Device dev,
                          cudaStream_t stream, const char* op) {
  ExpertCodes out{Tensor::empty(layout.transposed ? transposed_shape(s, layout) : x.shape(), c.format, dev),
                  Tensor::empty({s.G}, DType::F32, dev)};
  cast_into(x, c, s, layout, layout.transposed ? nullptr : codes_of(out.q), layout.transposed ? codes_of(out.q) : nullptr,
            out.scale, dev, stream, op);
  return out;
}

BothCodes cast_segments_both(const Tensor& x, ops::Fp8Cast c, const Segments& s, const CodeLayout& transposed,
                             Device dev, cudaStream_t stream, const char* op, const unsigned* given_amax) {
  BothCodes out{Tensor::empty(x.shape(), c.format, dev), Tensor::empty(transposed_shape(s, transposed), c.format, dev),
                Tensor::empty({s.G}, DType::F32, dev)};
  cast_into(x, c, s, transposed, codes_of(out.q), codes_of(out.q_t), out.scale, dev, stream, op, given_amax);
  return out;
}

Tensor rows_from_transposed(const Tensor& q_t, const Segments& s, const CodeLayout& transposed, Device dev,
                            cudaStream_t stream) {
  Tensor q = Tensor::empty({s.R, s.cols}, q_t.dtype(), dev);
  const dim3 grid = rows_grid(s);
  if (s.offsets && nonempty(grid) && s.cols > 0) {
    rows_from_transposed_kernel<<<grid, kThreads, 0, stream>>>(codes_of(q_t), s, transposed, codes_of(q));
    TETRA_CUDA_CHECK_LAUNCH();
  }
  return q;
}

bool gathered_cast_applies(const Tensor& rows, const Tensor& x) {
  const int64_t cols = x.dim(-1);
  const bool rows_ok = !rows.defined() || (rows.dtype() == x.dtype() && reinterpret_cast<uintptr_t>(rows.data_ptr()) % 16 == 0);
  return rows_ok && cols % kV == 0 && reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 == 0;
}

BothCodes cast_gathered_both(Tensor& rows, const Tensor& x, ops::Fp8Cast c, const Segments& s,
                             const CodeLayout& transposed, Device dev, cudaStream_t stream, const char* op,
                             const unsigned* given_token_amax) {
  if (!s.gather || !s.offsets || !gathered_cast_applies(rows, x))
    TETRA_FAIL(Internal, op, ": the gathered cast needs a gather, offsets and 8-column vectors of one dtype");
  BothCodes out{Tensor::empty({s.R, s.cols}, c.format, dev), Tensor::empty(transposed_shape(s, transposed), c.format, dev),
                Tensor::empty({s.G}, DType::F32, dev)};
  const Fp8Format f = fp8_format_of(c.format);
  const int64_t N = x.dim(0);
  Tensor token_amax = given_token_amax ? Tensor() : Tensor::empty({N}, DType::U32, dev);
  dispatch_float(x.dtype(), op, "x", [&](auto tag) {
    using T = decltype(tag);
    const T* px = static_cast<const T*>(x.data_ptr());
    const unsigned* pt = given_token_amax ? given_token_amax : static_cast<const unsigned*>(token_amax.data_ptr());
    if (!given_token_amax && N > 0) {
      const int rows_a_block = kThreads / 32;
      token_amax_kernel<T><<<static_cast<unsigned>((N + rows_a_block - 1) / rows_a_block), kThreads, 0, stream>>>(
          px, N, s.cols, static_cast<unsigned*>(token_amax.data_ptr()));
      TETRA_CUDA_CHECK_LAUNCH();
    }
    const Tensor amax = measure(px, /*vec=*/true, s, f, out.scale, dev, stream, pt);
    const unsigned* pa = static_cast<const unsigned*>(amax.data_ptr());
    T* rows_out = rows.defined() ? static_cast<T*>(rows.data_ptr()) : nullptr;
    if (gathered_cast_kind() == GatheredCast::Gather)
      cast_transposed(px, /*vec=*/true, s, transposed, pa, f, codes_of(out.q_t), codes_of(out.q), stream, rows_out);
    else
      scatter_cast(px, N, s, transposed, pa, f, codes_of(out.q), codes_of(out.q_t), rows_out, dev, stream);
  });
  return out;
}

GatheredCast gathered_cast_kind() {
  const char* v = std::getenv("TETRA_MOE_GATHERED_CAST");
  if (!v || !*v || std::string(v) == "scatter") return GatheredCast::Scatter;
  if (std::string(v) == "gather") return GatheredCast::Gather;
  if (std::string(v) == "separate") return GatheredCast::Separate;
  TETRA_FAIL(Usage, "TETRA_MOE_GATHERED_CAST=", v, " is not a valid setting: use scatter, gather or separate");
}

bool dense_cast_applies(const Tensor& x, int64_t M, int64_t K, const void* q, const void* q_t) {
  const auto aligned = [](const void* p, uintptr_t b) { return reinterpret_cast<uintptr_t>(p) % b == 0; };
  return K % kV == 0 && aligned(x.data_ptr(), 16) && aligned(q, 8) && aligned(q_t, 8) &&
         (M + CastTile::kRows - 1) / CastTile::kRows <= 65535 && (K + CastTile::kCols - 1) / CastTile::kCols <= INT32_MAX;
}

void cast_dense_both(const Tensor& x, int64_t M, int64_t K, Fp8Format f, const unsigned* amax_bits, unsigned char* q,
                     unsigned char* q_t, float* scale, cudaStream_t stream) {
  Segments s;  // one weight: w[0] = x [M, K], its transpose [K, M]
  s.G = 1, s.O = M, s.cols = K;
  segment_scale_kernel<<<1, 128, 0, stream>>>(amax_bits, 1, f, scale);
  TETRA_CUDA_CHECK_LAUNCH();
  dispatch_float(x.dtype(), "fp8_quantize", "x", [&](auto tag) {
    using T = decltype(tag);
    cast_transposed(static_cast<const T*>(x.data_ptr()), /*vec=*/true, s, CodeLayout{true, nullptr, 0}, amax_bits, f,
                    q_t, q, stream);
  });
}

}  // namespace tetra::cuda
