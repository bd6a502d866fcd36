// CUDA FP8 casts (runtime/ops.h), the twins of runtime/cpu/fp8_cast.cpp bit for bit.
//
// One tile kernel casts every scaling: a block of 256 threads takes a 128-row × 128-column tile of
// x, each thread an 8 × 8 piece of it in registers (8 rows, 8 columns: one 16-byte load per row for
// bf16, two for fp32; bf16 on the vector paths through a shared-memory stage that the block's next
// tile is copied into while this one is cast, see kStaged). From the registers it takes the groups'
// amaxes (as unsigned bits of |x|: a NaN wins, as on the CPU), the factors r = fp8_quant_factor(amax)
// and q = cvt.rn.satfinite(x·r):
//   Rows1x128: each row's 128 columns are 16 threads of a half-warp (shuffles); q_t's 128×1 runs
//              down a column are the tile's 128 rows (a shuffle, then 8 warps through shared memory);
//   Blocks128: the tile is the block (a warp reduction, then 8 warps through shared memory); q_t has
//              the same codes, scale_t the block scale at the transposed place;
//   Tensorwise: r from the tensor's amax, which a vectorised reduction before it left in a scratch
//              word (one atomicMax per block on the bits); block 0 writes scale (and scale_t) from it,
//              so the tile kernel is also the finalisation. A given amax replaces the reduction: what
//              x's producer measured while writing it (x is then read once), or a tensor-parallel
//              part's whole; fp8_amax is the reduction alone.
// q: 8 codes per thread and row, one 8-byte store (a half-warp writes a row's 128 bytes). q_t: each
// thread's 8 codes down a column are one 8-byte word in a shared 128 × 128-byte tile (16-byte units
// XOR-swizzled by the row's eighth, so the writes are 2 wavefronts per warp, the minimum), read back
// as 16-byte rows of q_t and stored with 16-byte stores (8 threads write a row's 128 bytes).
// Vector access needs K % 8 == 0 (x, q) and M % 16 == 0 (q_t) with aligned pointers; otherwise the
// same kernel loads and stores element by element, with every index checked against M and K.
//
// Byte floor for x [16384, 2048] bf16 (33.6 M elements, 4.3 TB/s of HBM): read x 67.1 MB, write q
// 33.6 MB, q_t 33.6 MB, Rows1x128's scales 1.0 MB each (Blocks128's 8 KB):
//   Rows1x128 / Blocks128: 101.7 / 100.7 MB → 23.7 / 23.4 µs; with q_t 136.3 / 134.2 MB → 31.7 / 31.2 µs.
//   Tensorwise (x read twice: the amax precedes every code): 167.8 MB → 39.0 µs; with q_t 201.3 MB
//   → 46.8 µs.
// Index arithmetic is int64 throughout (rows × cols past 2^31), the grid strides over the tiles.
//
// Tensorwise with q_t, on the vector paths, takes the grouped casts' transposing kernel instead
// (runtime/cuda/moe_grouped_fp8_cast.h cast_dense_both: x as one weight of M rows, 8 × 8 pieces
// transposed in registers, no shared memory, a thread's 8 loads in flight), which reached 0.73–0.78
// of the byte floor on the MoE's casts where this kernel's tiles reached 0.55–0.60 (docs/kernels.md,
// "FP8 training v10"). TETRA_FP8_DENSE_CAST=tile keeps this kernel for every cast (read on every call,
// so a benchmark or test can run both).
#include <cuda_fp8.h>

#include <cstdlib>
#include <string>
#include <type_traits>

#include "runtime/cuda/cp_async.cuh"
#include "runtime/cuda/cuda_ops.h"
#include "runtime/cuda/device_context.h"
#include "runtime/cuda/dynamic_smem.h"
#include "runtime/cuda/kernel_common.cuh"
#include "runtime/cuda/moe_grouped_fp8_cast.h"
#include "runtime/fp8_cast_shape.h"

namespace tetra::cuda {

namespace {

constexpr int kTile = 128;                      // a tile: kTile rows × kTile columns of x
constexpr int kPiece = 8;                       // a thread's piece: kPiece rows × kPiece columns
constexpr int kSide = kTile / kPiece;           // 16 pieces along each side of the tile
constexpr int kThreads = kSide * kSide;         // 256
constexpr int kWarps = kThreads / 32;           // 8
constexpr unsigned kFull = 0xffffffffu;
static_assert(kTile == ops::kFp8Block, "a tile is one 128×128 block and holds whole 1×128 and 128×1 groups");

enum class Mode { Tensorwise, Rows1x128, Blocks128 };

struct TileArgs {
  int64_t rows = 0, cols = 0;                   // M, K
  int64_t tiles_down = 0, tiles_across = 0;     // ⌈M/128⌉, ⌈K/128⌉
  unsigned char* q = nullptr;
  float* scale = nullptr;
  unsigned char* q_t = nullptr;                 // null: no transposed copy
  float* scale_t = nullptr;                     // null where not given
  int64_t scale_ld = 1, scale_t_ld = 1;         // the scales' padded inner extents (fp8_scale_shape)
  const unsigned* amax_bits = nullptr;          // Tensorwise: the tensor's amax
  Fp8Format format = Fp8Format::E4M3;
  bool vec_t = false;                           // q_t rows take 16-byte stores (M % 16 == 0, aligned)
};


__device__ __forceinline__ float factor_of(unsigned amax_bits, float largest) {
  return fp8_quant_factor(__uint_as_float(amax_bits), largest);
}

// Two codes in the low 16 bits: a in the low byte (cvt.rn.satfinite, as __nv_cvt_float_to_fp8).
__device__ __forceinline__ unsigned cvt2(float a, float b, Fp8Format f) {
  return __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, f == Fp8Format::E4M3 ? __NV_E4M3 : __NV_E5M2);
}

// Eight scaled values → eight codes, byte j (little-endian) the code of s[j].
__device__ __forceinline__ uint2 cvt8(const float (&s)[kPiece], Fp8Format f) {
  return make_uint2(cvt2(s[0], s[1], f) | cvt2(s[2], s[3], f) << 16, cvt2(s[4], s[5], f) | cvt2(s[6], s[7], f) << 16);
}

__device__ __forceinline__ unsigned char byte_of(uint2 c, int j) {
  return static_cast<unsigned char>((j < 4 ? c.x >> (8 * j) : c.y >> (8 * (j - 4))) & 0xffu);
}

// v[p][j] = x[m0 + p, k0 + j], 0 outside x (|0| never raises an amax).
template <class T, bool kVec>
__device__ __forceinline__ void load_piece(const T* __restrict__ x, int64_t M, int64_t K, int64_t m0, int64_t k0,
                                           float (&v)[kPiece][kPiece]) {
#pragma unroll
  for (int p = 0; p < kPiece; ++p) {
    const int64_t m = m0 + p;
    if constexpr (kVec) {  // K % 8 == 0: a piece row is all inside or all outside
      if (m < M && k0 < K) {
        load_vec<kPiece>(x + m * K + k0, v[p]);
      } else {
#pragma unroll
        for (int j = 0; j < kPiece; ++j) v[p][j] = 0.0f;
      }
    } else {
#pragma unroll
      for (int j = 0; j < kPiece; ++j) v[p][j] = m < M && k0 + j < K ? to_f32(x[m * K + k0 + j]) : 0.0f;
    }
  }
}

// q[m, k0 .. k0 + 7] = the codes c, those inside q.
template <bool kVec>
__device__ __forceinline__ void store_q_row(unsigned char* q, int64_t M, int64_t K, int64_t m, int64_t k0, uint2 c) {
  if (m >= M) return;
  if constexpr (kVec) {
    if (k0 < K) *reinterpret_cast<uint2*>(q + m * K + k0) = c;
  } else {
#pragma unroll
    for (int j = 0; j < kPiece; ++j)
      if (k0 + j < K) q[m * K + k0 + j] = byte_of(c, j);
  }
}

// The byte offset in the shared q_t tile of row k (a column of x) and 16-byte unit u (rows 16u …
// 16u + 15 of x): the units of each row XOR-swizzled by k / 8.
__device__ __forceinline__ int swizzled(int k, int u) { return k * kTile + ((u ^ ((k / kPiece) % 8)) * 16); }

// The largest of each thread's v over the whole block; every thread gets it. `part` holds kWarps values.
__device__ __forceinline__ unsigned block_max(unsigned v, unsigned* part) {
  v = __reduce_max_sync(kFull, v);
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = v;
  __syncthreads();
  unsigned t = part[0];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) t = max(t, part[w]);
  return t;
}

// q_t's tile: the shared codes (row k_local of the tile, 128 bytes of rows) to q_t[k, m].
__device__ __forceinline__ void store_q_t_tile(const unsigned char* codes_t, const TileArgs& a, int64_t tile_m,
                                               int64_t tile_k) {
  const int u = threadIdx.x % 8;
#pragma unroll
  for (int i = 0; i < kTile / (kThreads / 8); ++i) {
    const int k_local = i * (kThreads / 8) + static_cast<int>(threadIdx.x) / 8;
    const int64_t k = tile_k * kTile + k_local, m = tile_m * kTile + u * 16;
    if (k >= a.cols || m >= a.rows) continue;
    const unsigned char* src = codes_t + swizzled(k_local, u);
    unsigned char* dst = a.q_t + k * a.rows + m;
    if (a.vec_t) {
      *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
    } else {
      for (int b = 0; b < 16 && m + b < a.rows; ++b) dst[b] = src[b];
    }
  }
}

// A thread's 8×8 piece of the 128×128 tile: rows m0 … m0 + 7 (row group rg of 16), columns
// k0 … k0 + 7 (column group cg of 16), and where the tile sits among the tiles.
struct Piece {
  int64_t m0, k0, tile_m, tile_k;
  int rg, cg;
};

// Rows1x128: each piece row's factor from the max over its 128 columns (the 16 lanes of a half-warp
// hold them); the row's first lane writes its scale.
__device__ __forceinline__ void row_factors(const float (&v)[kPiece][kPiece], float (&r_row)[kPiece], float largest,
                                            const TileArgs& a, const Piece& pc) {
  unsigned row_max[kPiece];
#pragma unroll
  for (int p = 0; p < kPiece; ++p) {
    row_max[p] = 0;
#pragma unroll
    for (int j = 0; j < kPiece; ++j) row_max[p] = max(row_max[p], abs_bits(v[p][j]));
  }
#pragma unroll
  for (int o = kSide / 2; o > 0; o /= 2)
#pragma unroll
    for (int p = 0; p < kPiece; ++p) row_max[p] = max(row_max[p], __shfl_xor_sync(kFull, row_max[p], o));
#pragma unroll
  for (int p = 0; p < kPiece; ++p) r_row[p] = factor_of(row_max[p], largest);
  if (pc.cg == 0)
#pragma unroll
    for (int p = 0; p < kPiece; ++p)
      if (pc.m0 + p < a.rows) a.scale[pc.tile_k * a.scale_ld + pc.m0 + p] = 1.0f / r_row[p];
}

// Rows1x128's transposed copy: 128×1 runs, column k0 + j over the tile's 128 rows, its max folded
// over the warps through part [kWarps][128]; the tile's first row group writes scale_t [⌈M/128⌉, K].
__device__ __forceinline__ void column_factors(const float (&v)[kPiece][kPiece], float (&r_col)[kPiece],
                                               float largest, const TileArgs& a, const Piece& pc,
                                               unsigned (*part)[kTile]) {
  const int tid = threadIdx.x, warp = tid / 32;
  unsigned col_max[kPiece];
#pragma unroll
  for (int j = 0; j < kPiece; ++j) {
    col_max[j] = 0;
#pragma unroll
    for (int p = 0; p < kPiece; ++p) col_max[j] = max(col_max[j], abs_bits(v[p][j]));
    col_max[j] = max(col_max[j], __shfl_xor_sync(kFull, col_max[j], 16));  // the warp's other 8 rows
  }
  if (tid % 32 < kSide) {
    uint4* dst = reinterpret_cast<uint4*>(&part[warp][pc.cg * kPiece]);
    dst[0] = make_uint4(col_max[0], col_max[1], col_max[2], col_max[3]);
    dst[1] = make_uint4(col_max[4], col_max[5], col_max[6], col_max[7]);
  }
  __syncthreads();
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    const uint4* src = reinterpret_cast<const uint4*>(&part[w][pc.cg * kPiece]);
    const uint4 lo = src[0], hi = src[1];
    const unsigned got[kPiece] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
    for (int j = 0; j < kPiece; ++j) col_max[j] = max(col_max[j], got[j]);
  }
#pragma unroll
  for (int j = 0; j < kPiece; ++j) r_col[j] = factor_of(col_max[j], largest);
  if (pc.rg == 0)
#pragma unroll
    for (int j = 0; j < kPiece; ++j)
      if (pc.k0 + j < a.cols) a.scale_t[pc.tile_m * a.scale_t_ld + pc.k0 + j] = 1.0f / r_col[j];
}

// Blocks128: the tile's one factor from the block's max; thread 0 writes its scale (and scale_t's).
__device__ __forceinline__ float block_factor(const float (&v)[kPiece][kPiece], float largest, const TileArgs& a,
                                              const Piece& pc, unsigned* part) {
  unsigned b = 0;
#pragma unroll
  for (int p = 0; p < kPiece; ++p)
#pragma unroll
    for (int j = 0; j < kPiece; ++j) b = max(b, abs_bits(v[p][j]));
  const float r = factor_of(block_max(b, part), largest);
  if (threadIdx.x == 0) {
    a.scale[pc.tile_m * a.scale_ld + pc.tile_k] = 1.0f / r;
    if (a.scale_t) a.scale_t[pc.tile_k * a.scale_t_ld + pc.tile_m] = 1.0f / r;
  }
  return r;
}

// The piece's codes: rows to q with their row factors, and (a transposed cast) columns through the
// shared codes_t tile to q_t with their column factors.
template <bool kVec>
__device__ __forceinline__ void store_codes(const float (&v)[kPiece][kPiece], const float (&r_row)[kPiece],
                                            const float (&r_col)[kPiece], const TileArgs& a, const Piece& pc,
                                            unsigned char* codes_t) {
#pragma unroll
  for (int p = 0; p < kPiece; ++p) {
    float s[kPiece];
#pragma unroll
    for (int j = 0; j < kPiece; ++j) s[j] = __fmul_rn(v[p][j], r_row[p]);
    store_q_row<kVec>(a.q, a.rows, a.cols, pc.m0 + p, pc.k0, cvt8(s, a.format));
  }
  if (a.q_t == nullptr) return;
  // Column k0 + j's 8 codes (rows m0 … m0 + 7) are one 8-byte word of q_t's row.
#pragma unroll
  for (int j = 0; j < kPiece; ++j) {
    float s[kPiece];
#pragma unroll
    for (int p = 0; p < kPiece; ++p) s[p] = __fmul_rn(v[p][j], r_col[j]);
    *reinterpret_cast<uint2*>(codes_t + swizzled(pc.cg * kPiece + j, pc.rg / 2) + (pc.rg % 2) * 8) =
        cvt8(s, a.format);
  }
  __syncthreads();
  store_q_t_tile(codes_t, a, pc.tile_m, pc.tile_k);
}

// bf16 x on the vector paths is staged through shared memory: the tile's 32 KB copied with cp.async
// (16-byte chunks, zeros outside x), the pieces read from there, and the block's next tile's copies
// issued as soon as every piece is in registers, so that its loads are in flight while this tile is
// reduced, cast and stored. (Loaded straight into registers, two blocks an SM had loads in flight
// only between tiles: 1.7–2.2 TB/s for 1×128 and 128×128, docs/kernels.md "Casts, second version".)
// fp32 x keeps the direct loads: its 64 KB tiles would leave one block an SM.
template <class T, bool kVec>
constexpr bool kStaged = kVec && std::is_same_v<T, bf16>;
constexpr int kStageBytes = kTile * kTile * 2;  // one bf16 tile, row r's 256 bytes at r·256

// Tile (tile_m, tile_k)'s copies into the stage, one commit group: thread tid copies chunks
// tid + 256·i (row c / 16, columns (c mod 16)·8 … + 7), a warp two rows' 256 contiguous bytes.
__device__ __forceinline__ void stage_tile(const bf16* x, int64_t M, int64_t K, int64_t tile_m, int64_t tile_k,
                                           uint32_t stage) {
#pragma unroll
  for (int i = 0; i < kStageBytes / 16 / kThreads; ++i) {
    const int c = static_cast<int>(threadIdx.x) + kThreads * i;
    const int64_t m = tile_m * kTile + c / kSide, k = tile_k * kTile + c % kSide * kPiece;
    const bool inside = m < M && k < K;  // K % 8 == 0: a chunk is all inside or all outside
    cp_async16(stage + static_cast<uint32_t>(c * 16), inside ? x + m * K + k : x, inside);
  }
  cp_async_commit();
}

// The thread's piece from the staged tile: 8 rows of 16 bytes (a quarter-warp reads a row's
// contiguous 128 bytes: no bank conflicts).
__device__ __forceinline__ void piece_from_stage(const unsigned char* stage, int rg, int cg,
                                                 float (&v)[kPiece][kPiece]) {
#pragma unroll
  for (int p = 0; p < kPiece; ++p)
    unpack_bf16x8(*reinterpret_cast<const uint4*>(stage + ((rg * kPiece + p) * kSide + cg) * 16), v[p]);
}

// The cast of one scaling (the file's header). x [M, K] of T; kVec: vector loads and q stores;
// kStaged<T, kVec>: the tiles staged through the dynamic shared memory (kStageBytes).
template <class T, Mode kMode, bool kVec>
__global__ void __launch_bounds__(kThreads, 2) fp8_tile_kernel(const T* __restrict__ x, TileArgs a) {
  __shared__ __align__(16) unsigned char codes_t[kTile * kTile];
  __shared__ __align__(16) unsigned part[kWarps][kTile];  // per-warp maxima
  extern __shared__ __align__(16) unsigned char stage[];  // kStaged only
  const int tid = threadIdx.x, rg = tid / kSide, cg = tid % kSide;
  const float largest = fp8_largest(a.format);
  float r_all = 0.0f;  // Tensorwise: the tensor's factor
  if constexpr (kMode == Mode::Tensorwise) {
    r_all = factor_of(*a.amax_bits, largest);
    if (blockIdx.x == 0 && tid == 0) {
      a.scale[0] = 1.0f / r_all;
      if (a.scale_t) a.scale_t[0] = 1.0f / r_all;
    }
  }
  const int64_t tiles = a.tiles_down * a.tiles_across;
  // Tensorwise takes the tiles from the end of x: what the amax reduction read last may still be in L2.
  auto tile_of = [&](int64_t i) { return kMode == Mode::Tensorwise ? tiles - 1 - i : i; };
  if constexpr (kStaged<T, kVec>) {
    if (blockIdx.x < tiles) {
      const int64_t t = tile_of(blockIdx.x);
      stage_tile(x, a.rows, a.cols, t / a.tiles_across, t % a.tiles_across, smem_addr(stage));
    }
  }
  for (int64_t i = blockIdx.x; i < tiles; i += gridDim.x) {
    const int64_t t = tile_of(i);
    Piece pc;
    pc.tile_m = t / a.tiles_across, pc.tile_k = t % a.tiles_across;
    pc.m0 = pc.tile_m * kTile + rg * kPiece, pc.k0 = pc.tile_k * kTile + cg * kPiece;
    pc.rg = rg, pc.cg = cg;
    float v[kPiece][kPiece];
    if constexpr (kStaged<T, kVec>) {
      cp_async_wait<0>();
      __syncthreads();  // every thread's copies landed
      piece_from_stage(stage, rg, cg, v);
      __syncthreads();  // every piece read: the stage takes the next tile
      if (i + gridDim.x < tiles) {
        const int64_t next = tile_of(i + gridDim.x);
        stage_tile(x, a.rows, a.cols, next / a.tiles_across, next % a.tiles_across, smem_addr(stage));
      }
    } else {
      load_piece<T, kVec>(x, a.rows, a.cols, pc.m0, pc.k0, v);
    }

    float r_row[kPiece], r_col[kPiece];  // the factor of each piece row (q) and piece column (q_t)
#pragma unroll
    for (int j = 0; j < kPiece; ++j) r_row[j] = r_col[j] = r_all;
    if constexpr (kMode == Mode::Rows1x128) {
      row_factors(v, r_row, largest, a, pc);
      if (a.q_t != nullptr) column_factors(v, r_col, largest, a, pc, part);
    } else if constexpr (kMode == Mode::Blocks128) {
      const float r = block_factor(v, largest, a, pc, &part[0][0]);
#pragma unroll
      for (int j = 0; j < kPiece; ++j) r_row[j] = r_col[j] = r;
    }
    store_codes<kVec>(v, r_row, r_col, a, pc, codes_t);
    __syncthreads();  // the shared tiles are free for the next tile
  }
}

// The Tensorwise amax: max |x| bits over the block (16-byte loads, kUnroll in flight per thread where
// x is 16-byte aligned; a scalar loop for the tail), at most one atomicMax per block (block_amax_to).
template <class T>
__global__ void __launch_bounds__(256) fp8_amax_kernel(const T* __restrict__ x, int64_t n, bool vec, unsigned* amax) {
  constexpr int kUnroll = 4;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t chunks = vec ? n / 8 : 0;  // 8 elements each
  unsigned m = 0;
  for (int64_t c = first; c < chunks; c += stride * kUnroll) {
    float v[kUnroll][8];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t cu = c + u * stride;
      if (cu < chunks) {
        load_vec<8>(x + cu * 8, v[u]);
      } else {
#pragma unroll
        for (int j = 0; j < 8; ++j) v[u][j] = 0.0f;
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
#pragma unroll
      for (int j = 0; j < 8; ++j) m = max(m, abs_bits(v[u][j]));
  }
  for (int64_t i = chunks * 8 + first; i < n; i += stride) m = max(m, abs_bits(to_f32(x[i])));
  block_amax_to(amax, m);
}

struct Groups {
  int64_t rows, cols, group_rows, group_cols, scale_ld;  // as Fp8CastShape
  bool rows_inner;
  __device__ int64_t of(int64_t m, int64_t k) const {
    return rows_inner ? (k / group_cols) * scale_ld + m / group_rows : (m / group_rows) * scale_ld + k / group_cols;
  }
};

Groups groups_of(const Fp8CastShape& s) {
  return {s.rows, s.cols, s.group_rows, s.group_cols, s.scale_ld, s.rows_inner};
}

__device__ __forceinline__ float from_fp8(unsigned char c, Fp8Format f) {
  const __half_raw h = __nv_cvt_fp8_to_halfraw(c, f == Fp8Format::E4M3 ? __NV_E4M3 : __NV_E5M2);
  return __half2float(__half(h));
}

template <class T>
__global__ void fp8_dequantize_kernel(T* y, Groups g, const unsigned char* q, const float* scale, Fp8Format f) {
  const int64_t n = g.rows * g.cols;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] = from_f32<T>(from_fp8(q[i], f) * scale[g.of(i / g.cols, i % g.cols)]);
}

// Blocks stride over the tiles, each taking tiles until none is left: a few waves of blocks (2
// resident per SM), or where the tiles are staged the resident blocks only, so that each block's
// copies of its next tile run behind its current one.
int tile_grid(int64_t tiles, bool staged, Device dev) {
  const int64_t waves = staged ? 2 : 8;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(tiles, int64_t{sm_count(dev)} * waves)));
}

template <class T, Mode kMode>
void launch_tiles(bool vec, Device dev, cudaStream_t stream, const T* x, const TileArgs& a) {
  const int64_t tiles = a.tiles_down * a.tiles_across;
  if (vec) {
    auto* kernel = fp8_tile_kernel<T, kMode, true>;
    constexpr size_t smem = kStaged<T, true> ? kStageBytes : 0;
    if (smem > 0) allow_dynamic_smem(kernel, smem);
    kernel<<<tile_grid(tiles, kStaged<T, true>, dev), kThreads, smem, stream>>>(x, a);
  } else {
    fp8_tile_kernel<T, kMode, false><<<tile_grid(tiles, false, dev), kThreads, 0, stream>>>(x, a);
  }
  TETRA_CUDA_CHECK_LAUNCH();
}

bool aligned8(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 7u) == 0; }

// *amax = max(*amax, the bits of every |x|) for x's n elements (the caller zeroes *amax first).
template <class T>
void launch_amax(const T* x, int64_t n, unsigned* amax, Device dev, cudaStream_t stream) {
  if (n == 0) return;
  const bool flat_vec = aligned16(x);
  const int64_t items = flat_vec ? n / 32 + 1 : n;  // threads: 4 chunks of 8 each
  fp8_amax_kernel<T><<<grid_size(items, 256, dev, 8), 256, 0, stream>>>(x, n, flat_vec, amax);
  TETRA_CUDA_CHECK_LAUNCH();
}

}  // namespace

void fp8_amax(Tensor& amax, const Tensor& x) {
  const char* op = "fp8_amax";
  check_cuda_tensor(op, "amax", amax);
  check_cuda_tensor(op, "x", x);
  fp8_check_amax_out(op, amax);
  DeviceScope device_scope(x.device());
  cudaStream_t stream = stream_of(x.device());
  TETRA_CUDA_CHECK(cudaMemsetAsync(amax.data_ptr(), 0, sizeof(unsigned), stream));
  dispatch_float(x.dtype(), op, "x", [&](auto tx) {
    using T = decltype(tx);
    launch_amax(static_cast<const T*>(x.data_ptr()), x.numel(), static_cast<unsigned*>(amax.data_ptr()), x.device(),
                stream);
  });
}

namespace {

// Whether TETRA_FP8_DENSE_CAST lets a Tensorwise cast with q_t take the transposing kernel (the file's
// header): unset or "auto" yes, "tile" no.
bool transposing_kernel_allowed() {
  const char* v = std::getenv("TETRA_FP8_DENSE_CAST");
  if (!v || !*v || std::string(v) == "auto") return true;
  if (std::string(v) == "tile") return false;
  TETRA_FAIL(Usage, "TETRA_FP8_DENSE_CAST=", v, " is not a valid setting: use auto or tile");
}

}  // namespace

void fp8_quantize(Tensor& q, Tensor& scale, const Tensor& x, ops::Fp8Scaling scaling, Tensor* q_t, Tensor* scale_t,
                  const Tensor* amax_given) {
  const char* op = "fp8_quantize";
  check_cuda_tensor(op, "q", q);
  check_cuda_tensor(op, "scale", scale);
  check_cuda_tensor(op, "x", x);
  if (given(q_t)) check_cuda_tensor(op, "q_t", *q_t);
  if (given(scale_t)) check_cuda_tensor(op, "scale_t", *scale_t);
  if (given(amax_given)) check_cuda_tensor(op, "amax", *amax_given);
  const Fp8CastShape s = fp8_cast_shape(op, q, scale, x, scaling, q_t, scale_t);
  const bool use_given = fp8_check_amax(op, amax_given, scaling);
  const Device dev = x.device();
  DeviceScope device_scope(dev);
  cudaStream_t stream = stream_of(dev);
  TileArgs a;
  a.rows = s.rows;
  a.cols = s.cols;
  a.tiles_down = (s.rows + kTile - 1) / kTile;
  a.tiles_across = (s.cols + kTile - 1) / kTile;
  a.q = static_cast<unsigned char*>(q.data_ptr());
  a.scale = scale.data<float>();
  a.q_t = given(q_t) ? static_cast<unsigned char*>(q_t->data_ptr()) : nullptr;
  a.scale_t = given(scale_t) ? scale_t->data<float>() : nullptr;
  a.format = s.format;
  a.scale_ld = s.scale_ld;
  a.scale_t_ld = given(scale_t) ? scale_t->dim(-1) : 1;
  a.vec_t = a.q_t && s.rows % 16 == 0 && aligned16(a.q_t);
  // The scales' padding (fp8_scale_shape) holds 0, as the CPU writes it; no tile writes it.
  const bool rows = scaling == ops::Fp8Scaling::Rows1x128;
  const int64_t inner = rows ? s.rows : a.tiles_across, inner_t = rows ? s.cols : a.tiles_down;
  if (scaling != ops::Fp8Scaling::Tensorwise && a.scale_ld != inner)
    TETRA_CUDA_CHECK(cudaMemsetAsync(scale.data_ptr(), 0, scale.nbytes(), stream));
  if (scaling != ops::Fp8Scaling::Tensorwise && given(scale_t) && a.scale_t_ld != inner_t)
    TETRA_CUDA_CHECK(cudaMemsetAsync(scale_t->data_ptr(), 0, scale_t->nbytes(), stream));
  const bool vec = s.cols % 8 == 0 && aligned16(x.data_ptr()) && aligned8(a.q);
  const int64_t tiles = a.tiles_down * a.tiles_across;
  Tensor amax;  // Tensorwise: the amax bits, read by every block of the tile kernel (the caller's if given)
  if (use_given) {
    a.amax_bits = static_cast<const unsigned*>(amax_given->data_ptr());
  } else if (scaling == ops::Fp8Scaling::Tensorwise) {
    amax = Tensor::empty({1}, DType::U32, dev);
    a.amax_bits = static_cast<const unsigned*>(amax.data_ptr());
    TETRA_CUDA_CHECK(cudaMemsetAsync(amax.data_ptr(), 0, sizeof(unsigned), stream));
  } else if (tiles == 0) {
    return;  // no groups: the scales are empty
  }
  const bool transposing = scaling == ops::Fp8Scaling::Tensorwise && a.q_t && vec &&
                           dense_cast_applies(x, s.rows, s.cols, a.q, a.q_t) && transposing_kernel_allowed();
  dispatch_float(x.dtype(), op, "x", [&](auto tx) {
    using T = decltype(tx);
    const T* px = static_cast<const T*>(x.data_ptr());
    switch (scaling) {
      case ops::Fp8Scaling::Tensorwise: {
        if (!use_given) launch_amax(px, s.rows * s.cols, static_cast<unsigned*>(amax.data_ptr()), dev, stream);
        if (!transposing) {
          launch_tiles<T, Mode::Tensorwise>(vec, dev, stream, px, a);
          return;
        }
        cast_dense_both(x, s.rows, s.cols, s.format, a.amax_bits, a.q, a.q_t, a.scale, stream);
        if (a.scale_t)
          TETRA_CUDA_CHECK(cudaMemcpyAsync(a.scale_t, a.scale, sizeof(float), cudaMemcpyDeviceToDevice, stream));
        return;
      }
      case ops::Fp8Scaling::Rows1x128: launch_tiles<T, Mode::Rows1x128>(vec, dev, stream, px, a); return;
      case ops::Fp8Scaling::Blocks128: launch_tiles<T, Mode::Blocks128>(vec, dev, stream, px, a); return;
    }
  });
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
