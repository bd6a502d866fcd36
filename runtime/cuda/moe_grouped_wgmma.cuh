// What the Hopper grouped GEMM kernels (runtime/cuda/moe_grouped_gemm_*sm90a.cu) share: the launch
// parameters, the PTX wrappers (wgmma, fences, mbarriers; cp.async in runtime/cuda/cp_async.cuh),
// the loads into wgmma's 128-byte-swizzled shared-memory layouts, and the persistent tile list built
// from the device offsets. Header-only, for *_sm90a.cu files; the device code exists only in sm_90a
// passes (TETRA_WGMMA).
//
// Shared-memory layouts are wgmma's canonical 128-byte-swizzled ones (1024-byte atoms of 8 rows of
// 128 bytes, 16-byte chunk index XOR the row within the atom), k steps of kBK = 64:
//   K-major tile [rows][64 k]: row r at r·128 bytes; a descriptor's k16 slice starts 32 bytes further
//   per step; stride between 8-row groups (SBO) 1024 bytes.
//   M/N-major tile [64 k][cols]: atom (column block a of 64, k group g of 8 rows) at (a·8 + g)·1024 bytes;
//   descriptor LBO = 8192 bytes (the next 64 columns), SBO = 1024 bytes (the next 8 k rows); the k16
//   slice starts two atoms further per step. wgmma reads these with its transpose flag set.
// Forward: A = x rows (K-major), B = w[g] (K-major). BackwardInput: A = dy rows (K-major), B = w[g]
// (N-major). BackwardWeight: A = dy rows (M-major), B = x rows (N-major). The FP8 kernel
// (moe_grouped_gemm_fp8_sm90a.cu) reads every operand K-major, 128 codes a row (k-tiles of 128).
#pragma once
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <utility>
#include <type_traits>

#include "runtime/cuda/cp_async.cuh"
#include "runtime/cuda/device_context.h"
#include "runtime/cuda/dynamic_smem.h"
#include "runtime/cuda/kernel_common.cuh"
#include "runtime/cuda/moe_grouped_gemm.h"
#include "runtime/cuda/moe_grouped_tiles.cuh"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define TETRA_WGMMA 1
#endif

namespace tetra::cuda::wgmma {

constexpr int kBK = 64;                 // k per pipeline stage
constexpr int kMaxTableGroups = 1024;   // experts per launch (the tile table lives in shared memory)

// The launch parameters, for operands of element type T (bf16; FP8 codes as unsigned char).
template <class T>
struct ParamsT {
  const T* a;
  const T* b;
  void* c;
  const int32_t* offsets;
  int G;
  int64_t R, O, I;
  int tiles_m, tiles_n;
  bool accumulate;
  // FP8 (moe_grouped_gemm_fp8_sm90a.cu): expert g's result times a_scale[g]·b_scale[g]; and for
  // BackwardWeight the experts' K ranges [po[g], po[g + 1]) of the transposed, padded operands
  // (multiples of kFp8BK). Null for bf16.
  const float* a_scale = nullptr;
  const float* b_scale = nullptr;
  const int32_t* padded_offsets = nullptr;
  // Blockwise (GroupedGemm::blockwise): a_scale and b_scale are per-128 scales instead, row strides
  // a_scale_ld and b_scale_ld (GroupedGemm's table).
  int64_t a_scale_ld = 0, b_scale_ld = 0;
};
using Params = ParamsT<bf16>;

// One output tile: where its operands and result are, and its extent.
template <class T>
struct TileT {
  const T* a;  // the tile's expert's A and B (row r0 applied); m0 / n0 are applied by the loads
  const T* b;
  int g;                    // the expert
  int64_t r0;               // the expert's first row (BackwardWeight with padded_offsets: its po[g])
  int64_t m0, n0, M, N, K;  // tile origin; the expert's problem extents
  int64_t c_offset;         // elements from c to the expert's C(0, 0)
};
using Tile = TileT<bf16>;

// Operand row strides (elements): A = x or dy rows, B = w[g] or x rows, C = y, dx or dw[g] rows.
template <GroupedGemmKind KIND, class T>
__host__ __device__ __forceinline__ int64_t lda(const ParamsT<T>& p) {
  return KIND == GroupedGemmKind::Forward ? p.I : p.O;
}
template <class T>
__host__ __device__ __forceinline__ int64_t ldb(const ParamsT<T>& p) {
  return p.I;
}
template <GroupedGemmKind KIND, class T>
__host__ __device__ __forceinline__ int64_t ldc(const ParamsT<T>& p) {
  return KIND == GroupedGemmKind::Forward ? p.O : p.I;
}

// Tiles of a launch (an upper bound for Forward / BackwardInput: every expert may end in a partial
// m tile), for the grid size.
inline int64_t tile_bound(const GroupedGemm& p, int tiles_m, int tiles_n, int bm) {
  return p.kind == GroupedGemmKind::BackwardWeight ? p.G * tiles_m * tiles_n : ((p.R + bm - 1) / bm + p.G) * tiles_n;
}

// The slice of one warpgroup as the copy engine's boxes: 64 rows × N of TC, in boxes of 128 bytes
// (the swizzle span) × 64 rows, each 128-byte swizzled (8 KB a box).
template <int N, class TC>
constexpr int tma_slice_bytes() {
  return 64 * N * static_cast<int>(sizeof(TC));
}

#ifdef TETRA_WGMMA

__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Keeps the compiler from moving accumulator reads or writes across an asynchronous wgmma.
__device__ __forceinline__ void fence_operand(float& r) { asm volatile("" : "+f"(r)::"memory"); }

// mbarriers in shared memory (8 bytes each): init with the arrivals one phase needs; arrive; wait
// until the phase of the given parity (0, 1, 0, … for phases 0, 1, 2, …) has completed.
__device__ __forceinline__ void mbarrier_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbarrier_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbarrier_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n"
        "}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}

// Arrives on bar and expects `bytes` of bulk tensor copies to complete on it in this phase.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}

// A box of the 2-D tensor map at (inner, outer) into shared memory at dst, completing on bar.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* map, int inner, int outer, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
          dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(inner), "r"(outer), "r"(bar)
      : "memory");
}

// A shared-memory matrix descriptor with 128-byte swizzling: start address, leading and stride byte
// offsets (each in 16-byte units, 14 bits), swizzle mode 1 (128B) in bits 62–63.
__device__ __forceinline__ uint64_t make_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  uint64_t d = 0;
  d |= static_cast<uint64_t>((addr & 0x3FFFF) >> 4);
  d |= static_cast<uint64_t>((lbo & 0x3FFFF) >> 4) << 16;
  d |= static_cast<uint64_t>((sbo & 0x3FFFF) >> 4) << 32;
  d |= static_cast<uint64_t>(1) << 62;
  return d;
}

// The descriptors of k16 step ks of a stage: an A slice of 64 rows starting at row `row0` (a
// multiple of 64) and the whole B tile.
template <bool KMAJOR>
__device__ __forceinline__ uint64_t desc_rows(uint32_t tile, int row0, int ks) {
  if (KMAJOR) return make_desc(tile + row0 * 128 + ks * 32, 16, 1024);
  return make_desc(tile + (((row0 / 64) * (kBK / 8) + 2 * ks) << 10), (kBK / 8) * 1024, 1024);
}

// d[0..127] += A(64×16) · B(16×256) for this warpgroup; TA / TB: the operand is M/N-major.
template <int TA, int TB>
__device__ __forceinline__ void wgmma_m64n256k16(float (&d)[128], uint64_t desc_a, uint64_t desc_b) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %132, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63,"
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79,"
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95,"
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111,"
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127},"
      " %128, %129, p, 1, 1, %130, %131;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
        "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
        "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
        "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
        "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
        "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
        "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
        "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(desc_a), "l"(desc_b), "n"(TA), "n"(TB), "r"(1));
}

// One operand tile of ROWS (along M or N) × 64 (k) into the swizzled layout at byte address s, by
// THREADS threads (thread index t):
//   K-major: element (i, k) at base[(i0 + i)·ld + k0 + k]; M/N-major: at base[(k0 + k)·ld + i0 + i];
//   valid for i0 + i < limit and k0 + k < K, zero otherwise.
// UNROLL: chunks a thread's loop issues per iteration (fewer: fewer registers live at once).
template <bool KMAJOR, int ROWS, int THREADS, int UNROLL = ROWS * kBK / 8 / THREADS>
__device__ __forceinline__ void load_tile(uint32_t s, int t, const bf16* base, int64_t ld, int64_t i0, int64_t limit,
                                          int64_t k0, int64_t K) {
  constexpr int kChunks = ROWS * kBK / 8;  // 16-byte chunks
  static_assert(kChunks % THREADS == 0, "every thread copies the same number of chunks");
#pragma unroll UNROLL
  for (int j = 0; j < kChunks / THREADS; ++j) {
    const int q = t + j * THREADS;
    if (KMAJOR) {
      const int row = q >> 3, c = q & 7;
      const int64_t gi = i0 + row, gk = k0 + c * 8;
      const bool valid = gi < limit && gk < K;
      cp_async16(s + row * 128 + ((c ^ (row & 7)) << 4), valid ? base + gi * ld + gk : base, valid);
    } else {
      constexpr int kColChunks = ROWS / 8;
      const int kr = q / kColChunks, cc = q % kColChunks;
      const int atom = cc >> 3, c = cc & 7, r = kr & 7;
      const int64_t gk = k0 + kr, gi = i0 + cc * 8;
      const bool valid = gk < K && gi < limit;
      cp_async16(s + ((atom * (kBK / 8) + (kr >> 3)) << 10) + (r << 7) + ((c ^ r) << 4),
                 valid ? base + gk * ld + gi : base, valid);
    }
  }
}

// The tile list of this launch, built once per block in shared memory (every thread calls it; it
// synchronises the block):
//   Forward / BackwardInput: table[g] = the first tile of expert g (tiles n-fastest), table[G] = total;
//   BackwardWeight: table[rank] = the expert of that rank (falling row count, ties by index).
template <GroupedGemmKind KIND, int BM, class T>
__device__ int64_t build_tile_table(const ParamsT<T>& p, int* table, int* rows) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (KIND != GroupedGemmKind::BackwardWeight) {
    if (warp == 0) {
      int prefix = 0;
      for (int g0 = 0; g0 < p.G; g0 += 32) {
        const int g = g0 + lane;
        int tiles = 0;
        if (g < p.G) {
          int64_t s, e;
          group_rows(p.offsets, g, p.R, &s, &e);
          tiles = static_cast<int>((e - s + BM - 1) / BM) * p.tiles_n;
        }
        const int incl = warp_inclusive_sum(tiles);
        if (g < p.G) table[g] = prefix + incl - tiles;
        prefix += __shfl_sync(0xffffffffu, incl, 31);
      }
      if (lane == 0) table[p.G] = prefix;
    }
    __syncthreads();
    return table[p.G];
  }
  if (p.G > kMaxLptGroups) {  // too many experts to sort here: expert order
    for (int g = threadIdx.x; g < p.G; g += blockDim.x) table[g] = g;
    __syncthreads();
    return static_cast<int64_t>(p.G) * p.tiles_m * p.tiles_n;
  }
  for (int g = threadIdx.x; g < p.G; g += blockDim.x) {
    int64_t s, e;
    group_rows(p.offsets, g, p.R, &s, &e);
    rows[g] = static_cast<int>(e - s);
  }
  __syncthreads();
  for (int g = threadIdx.x; g < p.G; g += blockDim.x) {
    int r = 0;
    for (int h = 0; h < p.G; ++h) r += rows[h] > rows[g] || (rows[h] == rows[g] && h < g);
    table[r] = g;
  }
  __syncthreads();
  return static_cast<int64_t>(p.G) * p.tiles_m * p.tiles_n;
}

// BackwardWeight with p.padded_offsets: K is the expert's padded extent and r0 its padded start.
template <GroupedGemmKind KIND, int BM, int BN, class E>
__device__ __forceinline__ TileT<E> tile_info(const ParamsT<E>& p, const int* table, int64_t t) {
  int g;
  int64_t local;
  if (KIND != GroupedGemmKind::BackwardWeight) {
    g = last_start_at_or_before(table, p.G, t);  // the expert whose tiles hold t
    local = t - table[g];
  } else {
    const int64_t per_group = static_cast<int64_t>(p.tiles_m) * p.tiles_n;
    g = table[t / per_group];
    local = t % per_group;
  }
  int64_t r0, r1;
  group_rows(p.offsets, g, p.R, &r0, &r1);
  TileT<E> T;
  T.g = g;
  T.r0 = r0;
  T.m0 = local / p.tiles_n * BM;
  T.n0 = local % p.tiles_n * BN;
  const int64_t w = static_cast<int64_t>(g) * p.O * p.I;
  if (KIND == GroupedGemmKind::Forward) {
    T.M = r1 - r0, T.N = p.O, T.K = p.I;
    T.a = p.a + r0 * p.I, T.b = p.b + w, T.c_offset = r0 * p.O;
  } else if (KIND == GroupedGemmKind::BackwardInput) {
    T.M = r1 - r0, T.N = p.I, T.K = p.O;
    T.a = p.a + r0 * p.O, T.b = p.b + w, T.c_offset = r0 * p.I;
  } else {
    T.M = p.O, T.N = p.I, T.K = r1 - r0;
    T.a = p.a + r0 * p.O, T.b = p.b + r0 * p.I, T.c_offset = w;
    if (p.padded_offsets) T.r0 = p.padded_offsets[g], T.K = p.padded_offsets[g + 1] - T.r0;
  }
  return T;
}

// store_slice's bf16 slice whose columns all lie within N: lanes 2p and 2p + 1 swap one word a pair
// of column groups (j, j + 1), so that each stores 4 adjacent values (8 bytes) where it held 2 of
// each group: lane 2p those of j at columns 8j + 4p …, lane 2p + 1 those of j + 1 at 8(j + 1) + 4p ….
// A warp's store then covers 32 contiguous bytes a row (a whole sector) instead of 16, with half the
// store instructions. `row` is this thread's first row; rows at or past M are not stored (every lane
// still takes part in the exchanges).
template <int N>
__device__ __forceinline__ void store_slice_bf16_paired(float (&d)[N / 2], bf16* C, int64_t ldc, int64_t row,
                                                        int64_t n0, int64_t M) {
  static_assert(N % 16 == 0, "column groups in pairs");
  const int lane = threadIdx.x % 32;
  const bool odd = lane & 1;
  const int p = (lane % 4) / 2;  // which pair of lanes in the quad
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int64_t gm = row + half * 8;
    // this lane's first value: column 8j + 4p of group j (even lanes) or j + 1 (odd ones)
    bf16* dst_row = C + gm * ldc + n0 + 4 * p + (odd ? 8 : 0);
#pragma unroll
    for (int j = 0; j < N / 8; j += 2) {
      const __nv_bfloat162 w0 = __floats2bfloat162_rn(d[4 * j + 2 * half], d[4 * j + 2 * half + 1]);
      const __nv_bfloat162 w1 = __floats2bfloat162_rn(d[4 * j + 4 + 2 * half], d[4 * j + 4 + 2 * half + 1]);
      const uint32_t u0 = *reinterpret_cast<const uint32_t*>(&w0), u1 = *reinterpret_cast<const uint32_t*>(&w1);
      const uint32_t got = __shfl_xor_sync(0xffffffffu, odd ? u0 : u1, 1);
      if (gm < M) *reinterpret_cast<uint2*>(dst_row + 8 * j) = odd ? make_uint2(got, u1) : make_uint2(u0, got);
    }
  }
}

// A warpgroup's accumulators of a 64 × N slice (m64nNk16 layout): thread (w, lane) of the warpgroup
// holds rows 16·w + lane/4 (+8) and columns 8j + 2·(lane mod 4) (+1), j < N/8, in d[4j + 2·half + {0, 1}].
// Writes them to C (row stride ldc) at rows row0 + ·, columns n0 + ·, within M × N; with `accumulate`,
// adds the previous values, all read first (independent loads, all in flight at once: read between
// the stores, each would wait for the store before it, since the compiler cannot prove them apart).
template <int N, class TC>
__device__ __forceinline__ void store_slice(float (&d)[N / 2], TC* C, int64_t ldc, int64_t row0, int64_t n0,
                                            int64_t M, int64_t Nlim, bool accumulate) {
  const int w = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32;
  const int64_t row = row0 + w * 16 + lane / 4;
  if (accumulate) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int64_t gm = row + half * 8;
      if (gm >= M) continue;
#pragma unroll
      for (int j = 0; j < N / 8; ++j) {
        const int64_t gn = n0 + 8 * j + 2 * (lane % 4);
        if (gn >= Nlim) continue;
        const TC* src = C + gm * ldc + gn;
        d[4 * j + 2 * half] += to_f32(src[0]);
        d[4 * j + 2 * half + 1] += to_f32(src[1]);
      }
    }
  }
  // A slice whose columns all lie within Nlim (every one but an expert's last n tile at most) stores
  // without a check a column: one address a row, then immediate offsets.
  const bool all_columns = n0 + N <= Nlim;
  if constexpr (std::is_same_v<TC, bf16>) {
    if (all_columns) return store_slice_bf16_paired<N>(d, C, ldc, row, n0, M);
  }
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int64_t gm = row + half * 8;
    if (gm >= M) continue;
    TC* dst_row = C + gm * ldc + n0 + 2 * (lane % 4);
    auto store = [&](int j) {
      const float v0 = d[4 * j + 2 * half], v1 = d[4 * j + 2 * half + 1];
      if constexpr (std::is_same_v<TC, bf16>) {
        *reinterpret_cast<__nv_bfloat162*>(dst_row + 8 * j) = __floats2bfloat162_rn(v0, v1);
      } else {
        *reinterpret_cast<float2*>(dst_row + 8 * j) = make_float2(v0, v1);
      }
    };
    if (all_columns) {
#pragma unroll
      for (int j = 0; j < N / 8; ++j) store(j);
    } else {
#pragma unroll
      for (int j = 0; j < N / 8; ++j)
        if (n0 + 8 * j + 2 * (lane % 4) < Nlim) store(j);
    }
  }
}

__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// This thread's committed bulk groups have read their shared memory (may be written again) ...
__device__ __forceinline__ void bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory"); }
// ... or have completed.
__device__ __forceinline__ void bulk_wait() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }
// The 128 threads of one warpgroup (named barrier `id`, not 0: __syncthreads' own).
__device__ __forceinline__ void warpgroup_barrier(int id) { asm volatile("bar.sync %0, 128;\n" ::"r"(id) : "memory"); }

// ---------- the tensor-store epilogue: a slice through shared memory, stored by the copy engine ----------

// The box at shared memory `src` to the tensor of `map` at (inner, outer), in this thread's current
// bulk group; parts past the tensor's extents are not written.
__device__ __forceinline__ void tma_store_2d(const CUtensorMap* map, uint32_t src, int inner, int outer) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n" ::"l"(
                   reinterpret_cast<uint64_t>(map)),
               "r"(inner), "r"(outer), "r"(src)
               : "memory");
}

// store_slice's stores of a whole 64-row slice (without `accumulate`) through the warpgroup's
// buffer `buf` (shared memory, 1024-byte aligned, tma_slice_bytes): every thread writes its values
// there in the boxes' swizzled layout (16-byte chunk c of row r at chunk c ^ (r % 8): the 8 rows one
// store instruction writes fall in 8 different chunks, no bank conflict), rounded as store_slice
// rounds them; then the warpgroup's first thread stores the boxes at columns n0 … (those below
// Nlim) and rows y0 … y0 + 63 of the tensor of `map` and goes on without waiting; the next call
// waits until the copy engine has read the buffer. The caller's last call is followed by bulk_wait()
// in that thread before the block ends. `barrier`: a named barrier id for this warpgroup alone.
template <int N, class TC>
__device__ __forceinline__ void store_slice_tma(const float (&d)[N / 2], uint32_t buf, const CUtensorMap* map,
                                                int64_t n0, int64_t y0, int64_t Nlim, int barrier) {
  constexpr int kSize = sizeof(TC), kBoxCols = 128 / kSize, kBoxes = N / kBoxCols, kBoxBytes = 64 * 128;
  const int w = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32;
  const bool issuer = threadIdx.x % 128 == 0;
  if (issuer) bulk_wait_read();
  warpgroup_barrier(barrier);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = w * 16 + lane / 4 + 8 * half;
    const uint32_t row = buf + static_cast<uint32_t>(r * 128);
#pragma unroll
    for (int j = 0; j < N / 8; ++j) {
      const float v0 = d[4 * j + 2 * half], v1 = d[4 * j + 2 * half + 1];
      const int byte = (8 * j + 2 * (lane % 4)) * kSize, in_box = byte % 128;
      const uint32_t at = row + static_cast<uint32_t>(byte / 128 * kBoxBytes + ((in_box / 16) ^ (r % 8)) * 16 +
                                                      in_box % 16);
      if constexpr (std::is_same_v<TC, bf16>) {
        const __nv_bfloat162 h = __floats2bfloat162_rn(v0, v1);
        asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(at), "r"(*reinterpret_cast<const uint32_t*>(&h)) : "memory");
      } else {
        asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(at), "f"(v0), "f"(v1) : "memory");
      }
    }
  }
  fence_proxy_async();  // the writes visible to the copy engine
  warpgroup_barrier(barrier);
  if (issuer) {
#pragma unroll
    for (int b = 0; b < kBoxes; ++b)
      if (n0 + b * kBoxCols < Nlim)
        tma_store_2d(map, buf + static_cast<uint32_t>(b * kBoxBytes), static_cast<int>(n0 + b * kBoxCols),
                     static_cast<int>(y0));
    bulk_commit();
  }
}

// Consumer `consumer`'s 64-row slice (rows T.m0 + 64·consumer …) of tile T, its sums in d: through its
// buffer of the two at `buffers` and the copy engine (STAGED; store_slice_tma with the named barrier
// `barrier`) where the slice is whole and not added to, else each thread's own stores (store_slice).
// A slice cut by its expert's end keeps the direct stores: its other rows are the next expert's.
template <GroupedGemmKind KIND, int N, class TC, bool STAGED, class E>
__device__ __forceinline__ void store_consumer_slice(const ParamsT<E>& p, const CUtensorMap* c_map, const TileT<E>& T,
                                                     float (&d)[N / 2], uint32_t buffers, int consumer, int barrier) {
  constexpr bool BW = KIND == GroupedGemmKind::BackwardWeight;
  const int64_t row0 = T.m0 + 64 * consumer;
  if constexpr (STAGED) {
    if (!(BW && p.accumulate) && row0 + 64 <= T.M) {  // (accumulating, the stores read the previous values)
      const uint32_t buf = buffers + static_cast<uint32_t>(consumer * tma_slice_bytes<N, TC>());
      // the slice's first row in the output tensor: the expert's rows (R of them), or the stack [G·O, I]
      const int64_t y0 = BW ? static_cast<int64_t>(T.g) * p.O + row0 : T.r0 + row0;
      store_slice_tma<N, TC>(d, buf, c_map, T.n0, y0, T.N, barrier);
      return;
    }
  }
  store_slice<N>(d, static_cast<TC*>(p.c) + T.c_offset, ldc<KIND>(p), row0, T.n0, T.M, T.N, BW && p.accumulate);
}

#endif  // TETRA_WGMMA

// cuTensorMapEncodeTiled from the driver, found through the runtime (no link against libcuda); null
// where the driver has none.
inline PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
  static std::once_flag once;
  static PFN_cuTensorMapEncodeTiled_v12000 fn = nullptr;
  std::call_once(once, [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q) == cudaSuccess &&
        q == cudaDriverEntryPointSuccess)
      fn = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  });
  return fn;
}

// A 2-D tensor [outer, inner] of `type` (elem_bytes each, row stride `inner` elements) for the bulk
// tensor copies: boxes of 128 bytes (the swizzle span) × box_outer rows, 128-byte swizzled, zeros
// past the extents. `kernel` names the caller in errors.
inline CUtensorMap tensor_map(const char* op, const char* kernel, const void* base, CUtensorMapDataType type,
                              int elem_bytes, int64_t inner, int64_t outer, int box_outer) {
  CUtensorMap map;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(inner), static_cast<cuuint64_t>(outer)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(inner) * elem_bytes};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(128 / elem_bytes), static_cast<cuuint32_t>(box_outer)};
  const cuuint32_t elem[2] = {1, 1};
  const CUresult r = encode_tiled()(&map, type, 2, const_cast<void*>(base), dims, strides, box, elem,
                                    CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                    CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    TETRA_FAIL(Internal, op, " (", kernel, "): cuTensorMapEncodeTiled failed with CUresult ", static_cast<int>(r),
               " for a [", outer, ", ", inner, "] tensor of ", elem_bytes, "-byte elements at ", base, " with boxes of ",
               128 / elem_bytes, " × ", box_outer);
  return map;
}

// A grouped GEMM's output C as the tensor-store epilogue's boxes (store_slice_tma: 128 bytes × 64
// rows): the rows [R, O] (forward) or [R, I] (input gradient), or the stacked weight gradient [G·O, I].
template <class TC>
CUtensorMap output_map(const GroupedGemm& p, const char* kernel) {
  const int64_t outer = p.kind == GroupedGemmKind::BackwardWeight ? p.G * p.O : p.R;
  const int64_t inner = p.kind == GroupedGemmKind::Forward ? p.O : p.I;
  const CUtensorMapDataType type = std::is_same_v<TC, bf16> ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                            : CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
  return tensor_map(p.op, kernel, p.c, type, static_cast<int>(sizeof(TC)), inner, outer, 64);
}

// Whether the device runs sm_90a code (compute capability 9.0) with `smem_bytes` of dynamic shared
// memory for one block (plus the static tile table).
bool device_fits(size_t smem_bytes, const char** why);

// The checks both Hopper kernels share (bf16 operands, O and I multiples of 8, aligned tensors, at
// most kMaxTableGroups experts, a build with sm_90a code); device_fits comes on top.
bool shape_applies(const GroupedGemm& p, const char** why);

}  // namespace tetra::cuda::wgmma
