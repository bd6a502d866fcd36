// The Hopper grouped GEMM (runtime/cuda/moe_grouped_gemm.h): warpgroup MMA (wgmma.mma_async, sm_90a
// tensor cores at their full rate, bf16 in, fp32 accumulation) on 128×256 output tiles with k steps of
// 64, fed from a 4-stage cp.async pipeline (two k-tiles in flight, zero-fill at an expert's edge so
// that no row of the next expert leaks into a weight gradient). Two warpgroups of 128 threads each own
// 64 rows × 256 columns (128 fp32 accumulators per thread) and both load and multiply. Persistent: one
// block per SM walks its share of the tile list (built in shared memory from the device offsets, in
// the order of runtime/cuda/moe_grouped_tiles.cuh) with one pipeline across tiles, so that a tile's
// start (finding its expert, the first loads) hides behind the previous tile's last k-tiles and its
// result, which goes from the accumulators straight to global memory.
//
// Shared-memory layouts are wgmma's canonical 128-byte-swizzled ones (1024-byte atoms of 8 rows of
// 128 bytes, 16-byte chunk index XOR the row within the atom):
//   K-major tile [rows][64 k]: row r at r·128 bytes; a descriptor's k16 slice starts 32 bytes further
//   per step; stride between 8-row groups (SBO) 1024 bytes.
//   M/N-major tile [64 k][cols]: atom (column block a of 64, k group g of 8 rows) at (a·8 + g)·1024 bytes;
//   descriptor LBO = 8192 bytes (the next 64 columns), SBO = 1024 bytes (the next 8 k rows); the k16
//   slice starts two atoms further per step. wgmma reads these with its transpose flag set.
// Forward: A = x rows (K-major), B = w[g] (K-major). BackwardInput: A = dy rows (K-major), B = w[g]
// (N-major). BackwardWeight: A = dy rows (M-major), B = x rows (N-major).
// cp.async writes shared memory through the generic proxy and wgmma reads it through the async proxy:
// each thread fences (fence.proxy.async) after its copies land and before the block barrier.
// Compiled for sm_90a only (wgmma); elsewhere the kernel is absent and grouped_gemm_wgmma_applies says no.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <limits>
#include <mutex>
#include <set>

#include "runtime/cuda/device_context.h"
#include "runtime/cuda/kernel_common.cuh"
#include "runtime/cuda/moe_grouped_gemm.h"
#include "runtime/cuda/moe_grouped_tiles.cuh"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define TETRA_WGMMA 1
#endif

namespace tetra::cuda {

namespace {

constexpr int kBM = 128, kBN = 256, kBK = 64, kStages = 4, kAhead = 2;  // k-tiles loaded ahead
constexpr int kThreads = 256;                                             // 2 warpgroups
constexpr int kAStageBytes = kBM * kBK * 2, kBStageBytes = kBN * kBK * 2;
constexpr int kStageBytes = kAStageBytes + kBStageBytes;
constexpr size_t kSmemBytes = static_cast<size_t>(kStages) * kStageBytes + 1024;  // + alignment
constexpr int kMaxTableGroups = 1024;  // experts per launch (the tile table lives in shared memory)
static_assert(kStages - kAhead >= 2, "a stage is overwritten two k-tiles after its wgmma was issued");

struct Params {
  const bf16* a;
  const bf16* b;
  void* c;
  const int32_t* offsets;
  int G;
  int64_t R, O, I;
  int tiles_m, tiles_n;
  bool accumulate;
};

#ifdef TETRA_WGMMA

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  const int size = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(size));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Keeps the compiler from moving accumulator reads or writes across an asynchronous wgmma.
__device__ __forceinline__ void fence_operand(float& r) { asm volatile("" : "+f"(r)::"memory"); }

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

// One operand tile of ROWS (along M or N) × 64 (k) into the swizzled layout at byte address s.
//   K-major: element (i, k) at base[(i0 + i)·ld + k0 + k]; M/N-major: at base[(k0 + k)·ld + i0 + i];
//   valid for i0 + i < limit and k0 + k < K, zero otherwise.
template <bool KMAJOR, int ROWS>
__device__ __forceinline__ void load_tile(uint32_t s, const bf16* base, int64_t ld, int64_t i0, int64_t limit,
                                          int64_t k0, int64_t K) {
  constexpr int kChunks = ROWS * kBK / 8;  // 16-byte chunks
#pragma unroll
  for (int t = 0; t < kChunks / kThreads; ++t) {
    const int q = threadIdx.x + t * kThreads;
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

#endif  // TETRA_WGMMA

#ifdef TETRA_WGMMA

// One output tile: where its operands and result are, and its extent.
struct Tile {
  const bf16* a;  // A(m0 + ·, ·) or A(·, m0 + ·): the tile's expert, m0 and k0 = 0 applied below
  const bf16* b;
  int64_t m0, n0, M, N, K;  // tile origin; the expert's problem extents
  int64_t c_offset;         // elements from c to the expert's C(0, 0)
};

// The tile list of this launch, built once per block in shared memory:
//   Forward / BackwardInput: table[g] = the first tile of expert g (tiles n-fastest), table[G] = total;
//   BackwardWeight: table[rank] = the expert of that rank (falling row count, ties by index).
template <GroupedGemmKind KIND>
__device__ int64_t build_tile_table(const Params& p, int* table, int* rows) {
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
          tiles = static_cast<int>((e - s + kBM - 1) / kBM) * p.tiles_n;
        }
        int incl = tiles;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
          const int v = __shfl_up_sync(0xffffffffu, incl, o);
          if (lane >= o) incl += v;
        }
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

template <GroupedGemmKind KIND>
__device__ __forceinline__ Tile tile_info(const Params& p, const int* table, int64_t t) {
  int g;
  int64_t local;
  if (KIND != GroupedGemmKind::BackwardWeight) {
    int lo = 0, hi = p.G - 1;  // the last expert whose first tile ≤ t (empty experts share their start)
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (table[mid] <= t) lo = mid;
      else hi = mid - 1;
    }
    g = lo;
    local = t - table[g];
  } else {
    const int64_t per_group = static_cast<int64_t>(p.tiles_m) * p.tiles_n;
    g = table[t / per_group];
    local = t % per_group;
  }
  int64_t r0, r1;
  group_rows(p.offsets, g, p.R, &r0, &r1);
  Tile T;
  T.m0 = local / p.tiles_n * kBM;
  T.n0 = local % p.tiles_n * kBN;
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
  }
  return T;
}

#endif  // TETRA_WGMMA

// Persistent: each block takes tiles blockIdx.x, blockIdx.x + gridDim.x, … and runs one pipeline over
// the sequence of all their k-tiles, so that the next tile's first k-tiles load while the current
// tile finishes and writes its result (straight from the accumulators: the pipeline's shared memory
// stays busy). Stage of the i-th k-tile in the sequence: i mod 4; loaded at step i − 2.
template <GroupedGemmKind KIND, class TC>
__global__ void __launch_bounds__(kThreads, 1) grouped_gemm_wgmma_kernel(Params p) {
#ifdef TETRA_WGMMA
  constexpr bool A_KMAJOR = KIND != GroupedGemmKind::BackwardWeight;
  constexpr bool B_KMAJOR = KIND == GroupedGemmKind::Forward;
  // the operands' row strides: A = x or dy rows, B = w[g] or x rows
  const int64_t lda = KIND == GroupedGemmKind::Forward ? p.I : p.O;
  const int64_t ldb = p.I;
  const int64_t ldc = KIND == GroupedGemmKind::Forward ? p.O : p.I;
  extern __shared__ unsigned char smem_raw[];
  __shared__ int table[kMaxTableGroups + 1];
  __shared__ int rows[kMaxLptGroups];
  const int64_t total = build_tile_table<KIND>(p, table, rows);

  // 1024-byte aligned stages (the swizzle pattern repeats every 1024 bytes of address)
  const uint32_t raw = smem_addr(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  auto a_stage = [&](int s) { return base + static_cast<uint32_t>(s * kStageBytes); };
  auto b_stage = [&](int s) { return base + static_cast<uint32_t>(s * kStageBytes + kAStageBytes); };

  // The load cursor: tile t_load, its k-tile kt_load (tiles without k-tiles are skipped here).
  int64_t t_load = blockIdx.x, kt_load = 0;
  Tile L{};
  int64_t kt_count = 0;
  auto seek = [&] {  // from (t_load, kt_load) to the next k-tile that exists
    while (t_load < total) {
      if (kt_load == 0) {
        L = tile_info<KIND>(p, table, t_load);
        kt_count = (L.K + kBK - 1) / kBK;
      }
      if (kt_load < kt_count) return;
      t_load += gridDim.x;
      kt_load = 0;
    }
  };
  seek();
  int stage_load = 0;
  auto issue = [&] {  // loads the cursor's k-tile (if any) as one commit group, then advances
    if (t_load < total) {
      const int64_t k0 = kt_load * kBK;
      load_tile<A_KMAJOR, kBM>(a_stage(stage_load), L.a, lda, L.m0, L.M, k0, L.K);
      load_tile<B_KMAJOR, kBN>(b_stage(stage_load), L.b, ldb, L.n0, L.N, k0, L.K);
      ++kt_load;
      seek();
    }
    cp_async_commit();
    stage_load = (stage_load + 1) % kStages;
  };
#pragma unroll
  for (int s = 0; s < kAhead; ++s) issue();

  const int wg = threadIdx.x / 128, w = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32;
  int stage = 0;
  float d[128];
  for (int64_t t = blockIdx.x; t < total; t += gridDim.x) {
    const Tile T = tile_info<KIND>(p, table, t);
    const int64_t KT = (T.K + kBK - 1) / kBK;
    if (KIND == GroupedGemmKind::BackwardWeight && KT == 0 && p.accumulate) continue;  // adds nothing
#pragma unroll
    for (int i = 0; i < 128; ++i) d[i] = 0.0f;
    for (int64_t kt = 0; kt < KT; ++kt) {
      cp_async_wait<kAhead - 1>();  // this thread's copies of this k-tile have landed
      fence_proxy_async();          // … and are visible to wgmma's async proxy
      __syncthreads();              // everyone's; and every warpgroup's wgmma two k-tiles back is complete
      issue();                      // the k-tile two ahead, into the stage of the one two back
      wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < kBK / 16; ++ks) {
        uint64_t da, db;
        if (A_KMAJOR) da = make_desc(a_stage(stage) + wg * 64 * 128 + ks * 32, 16, 1024);
        else da = make_desc(a_stage(stage) + ((wg * (kBK / 8) + 2 * ks) << 10), (kBK / 8) * 1024, 1024);
        if (B_KMAJOR) db = make_desc(b_stage(stage) + ks * 32, 16, 1024);
        else db = make_desc(b_stage(stage) + ((2 * ks) << 10), (kBK / 8) * 1024, 1024);
        wgmma_m64n256k16<A_KMAJOR ? 0 : 1, B_KMAJOR ? 0 : 1>(d, da, db);
      }
      wgmma_commit();
      wgmma_wait<1>();  // the k-tile before this one is done with its stage
#pragma unroll
      for (int i = 0; i < 128; ++i) fence_operand(d[i]);
      stage = (stage + 1) % kStages;
    }
    wgmma_wait<0>();
#pragma unroll
    for (int i = 0; i < 128; ++i) fence_operand(d[i]);
    // The result from the accumulators: thread (w, lane) holds rows 16·w + lane/4 (+8) of its
    // warpgroup's 64, columns 8j + 2·(lane mod 4) (+1) for j < 32.
    TC* C = static_cast<TC*>(p.c) + T.c_offset;
    const int64_t row = T.m0 + wg * 64 + w * 16 + lane / 4;
    if (KIND == GroupedGemmKind::BackwardWeight && p.accumulate) {
      // Every previous value first, in a loop without stores: the loads are independent and all in
      // flight at once. Read between the stores below, each would wait for the store before it
      // (the compiler cannot prove the addresses apart), one memory latency per pair.
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int64_t gm = row + half * 8;
        if (gm >= T.M) continue;
#pragma unroll
        for (int j = 0; j < kBN / 8; ++j) {
          const int64_t gn = T.n0 + 8 * j + 2 * (lane % 4);
          if (gn >= T.N) continue;
          const TC* src = C + gm * ldc + gn;
          d[4 * j + 2 * half] += to_f32(src[0]);
          d[4 * j + 2 * half + 1] += to_f32(src[1]);
        }
      }
    }
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int64_t gm = row + half * 8;
      if (gm >= T.M) continue;
#pragma unroll
      for (int j = 0; j < kBN / 8; ++j) {
        const int64_t gn = T.n0 + 8 * j + 2 * (lane % 4);
        if (gn >= T.N) continue;
        const float v0 = d[4 * j + 2 * half], v1 = d[4 * j + 2 * half + 1];
        TC* dst = C + gm * ldc + gn;
        if constexpr (std::is_same_v<TC, bf16>) {
          *reinterpret_cast<__nv_bfloat162*>(dst) = __floats2bfloat162_rn(v0, v1);
        } else {
          *reinterpret_cast<float2*>(dst) = make_float2(v0, v1);
        }
      }
    }
  }
  cp_async_wait<0>();
#endif  // TETRA_WGMMA
}

template <GroupedGemmKind KIND, class TC>
void launch(const Params& prm, int64_t blocks, cudaStream_t stream) {
  auto kernel = grouped_gemm_wgmma_kernel<KIND, TC>;
  {  // the dynamic shared memory limit, once per (instantiation, device)
    static std::mutex mu;
    static std::set<int> devices;
    int dev = 0;
    TETRA_CUDA_CHECK(cudaGetDevice(&dev));
    std::lock_guard<std::mutex> lock(mu);
    if (devices.insert(dev).second)
      TETRA_CUDA_CHECK(
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSmemBytes)));
  }
  kernel<<<static_cast<unsigned>(blocks), kThreads, kSmemBytes, stream>>>(prm);
  TETRA_CUDA_CHECK_LAUNCH();
}

// Whether the device runs sm_90a code (compute capability 9.0) with room for the pipeline.
bool device_fits(const char** why) {
  int dev = 0, major = 0, minor = 0, optin = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) {
    if (why) *why = "the device could not be queried";
    return false;
  }
  if (major != 9 || minor != 0) {
    if (why) *why = "wgmma needs a compute capability 9.0 (Hopper) device";
    return false;
  }
  if (static_cast<size_t>(optin) < kSmemBytes + 2048) {
    if (why) *why = "the device has too little shared memory per block";
    return false;
  }
  return true;
}

}  // namespace

bool grouped_gemm_wgmma_applies(const GroupedGemm& p, const char** why) {
  auto no = [&](const char* reason) {
    if (why) *why = reason;
    return false;
  };
#if !defined(TETRA_HAVE_SM90A)
  return no("tetra was built without sm_90a code (CMAKE_CUDA_ARCHITECTURES must include 90a)");
#endif
  if (p.ab_type != DType::BF16) return no("the operands are not bf16");
  if (p.c_type != DType::BF16 && p.c_type != DType::F32) return no("the output is neither bf16 nor fp32");
  if (p.O % 8 != 0 || p.I % 8 != 0) return no("O or I is not a multiple of 8");
  if (!aligned16(p.a) || !aligned16(p.b) || !aligned16(p.c)) return no("a tensor is not 16-byte aligned");
  if (p.G > kMaxTableGroups) return no("more than 1024 experts in one call");
  static const bool fits = device_fits(nullptr);
  if (!fits) {
    device_fits(why);
    return false;
  }
  return true;
}

void grouped_gemm_wgmma(const GroupedGemm& p, Device device, cudaStream_t stream) {
  const char* why = nullptr;
  if (!grouped_gemm_wgmma_applies(p, &why)) TETRA_FAIL(Internal, p.op, " (wgmma kernel): not applicable: ", why);
  const int64_t N = p.kind == GroupedGemmKind::Forward ? p.O : p.I;
  Params prm{static_cast<const bf16*>(p.a), static_cast<const bf16*>(p.b), p.c, p.offsets, static_cast<int>(p.G), p.R,
             p.O, p.I, static_cast<int>((p.O + kBM - 1) / kBM), static_cast<int>((N + kBN - 1) / kBN), p.accumulate};
  // Persistent blocks, one per SM at most (one fits: 193 KB of shared memory), never more than tiles.
  const int64_t tiles = p.kind == GroupedGemmKind::BackwardWeight ? p.G * prm.tiles_m * prm.tiles_n
                                                                  : ((p.R + kBM - 1) / kBM + p.G) * prm.tiles_n;
  const int64_t blocks = std::min<int64_t>(tiles, sm_count(device));
  if (blocks == 0) return;
  auto by_output = [&](auto tc) {
    using TC = decltype(tc);
    switch (p.kind) {
      case GroupedGemmKind::Forward: return launch<GroupedGemmKind::Forward, TC>(prm, blocks, stream);
      case GroupedGemmKind::BackwardInput: return launch<GroupedGemmKind::BackwardInput, TC>(prm, blocks, stream);
      case GroupedGemmKind::BackwardWeight: return launch<GroupedGemmKind::BackwardWeight, TC>(prm, blocks, stream);
    }
  };
  if (p.c_type == DType::BF16) by_output(bf16{});
  else by_output(float{});
}

}  // namespace tetra::cuda
