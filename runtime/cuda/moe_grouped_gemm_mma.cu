// The tensor-core grouped GEMM (runtime/cuda/moe_grouped_gemm.h): bf16 operands, fp32 accumulation,
// mma.sync.m16n8k16 fed by ldmatrix from a 4-stage cp.async pipeline, one 128×128 output tile per
// block (8 warps of 64×32), tiles of one expert each. The offsets are read on the device:
//   Forward / BackwardInput (M = an expert's rows): block b takes the b-th tile of the list of every
//   expert's ⌈m_g/128⌉ × ⌈N/128⌉ tiles (n fastest, so neighbouring blocks share x rows); the grid is
//   the upper bound (⌈R/128⌉ + G)·⌈N/128⌉ and blocks past the list return at once.
//   BackwardWeight (K = an expert's rows): G·⌈O/128⌉·⌈I/128⌉ blocks, experts taken in order of falling
//   row count (ties by index) so that the longest tiles start first (the hardware issues blocks in
//   index order); an expert without rows writes zeros (or leaves dw when accumulating).
// Shared-memory tiles are swizzled (16-byte chunk index XOR the row) so that ldmatrix reads 8 rows
// without bank conflicts: K-major tiles [128][32] XOR ((row/2) mod 4), M/N-major tiles [32][128]
// XOR (k mod 8). The result goes through shared memory (fp32 [128][132]) so that every row is written
// (and, accumulating, read) in 16-byte vectors.
// Shapes: O and I multiples of 8, tensors 16-byte aligned; rows past an expert's end and columns past
// N are zero-filled on load and masked on store. Offsets are clamped to [0, R] and made nondecreasing.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <limits>
#include <mutex>
#include <set>

#include "runtime/cuda/cp_async.cuh"
#include "runtime/cuda/device_context.h"
#include "runtime/cuda/kernel_common.cuh"
#include "runtime/cuda/moe_grouped_gemm.h"
#include "runtime/cuda/moe_grouped_tiles.cuh"

namespace tetra::cuda {

namespace {

constexpr int kBM = 128, kBN = 128, kBK = 32, kStages = 4;
constexpr int kThreads = 256;               // 8 warps: 2 along M × 4 along N, each 64 × 32
constexpr int kWarpM = 64, kWarpN = 32;
constexpr int kMI = kWarpM / 16, kNI = kWarpN / 8;  // m16 and n8 fragments per warp
constexpr int kStageElems = (kBM + kBN) * kBK;      // bf16 per pipeline stage (A then B)
constexpr int kCStride = kBN + 4;                   // fp32 staging row, padded
constexpr size_t kPipeBytes = static_cast<size_t>(kStages) * kStageElems * 2;
constexpr size_t kStageCBytes = static_cast<size_t>(kBM) * kCStride * 4;
constexpr size_t kSmemBytes = kPipeBytes > kStageCBytes ? kPipeBytes : kStageCBytes;

struct Params {
  const bf16* a;
  const bf16* b;
  void* c;
  const int32_t* offsets;
  int G;
  int64_t R;
  int64_t O, I;
  int tiles_n;      // ⌈N/128⌉
  int tiles_m;      // BackwardWeight: ⌈O/128⌉
  bool accumulate;
};

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// d += a · b for one m16n8k16 fragment (bf16 in, fp32 accumulate).
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Element offsets in the swizzled tiles.
// K-major [rows][32]: element (row, k).
__device__ __forceinline__ int kmajor_at(int row, int k) {
  return row * kBK + ((((k >> 3) ^ ((row >> 1) & 3))) << 3) + (k & 7);
}
// M/N-major [32][128]: element (k, col).
__device__ __forceinline__ int mnmajor_at(int k, int col) {
  return k * 128 + ((((col >> 3) ^ (k & 7))) << 3) + (col & 7);
}

// Loads one operand tile of 128 (rows or columns) × 32 (k) into shared memory.
//   K-major: element (i, k) at base[(i0 + i)·ld + k0 + k], valid for i0 + i < limit, k0 + k < K.
//   M/N-major: element (k, i) at base[(k0 + k)·ld + i0 + i], same validity.
template <bool KMAJOR>
__device__ __forceinline__ void load_tile(bf16* s, const bf16* base, int64_t ld, int64_t i0, int64_t limit, int64_t k0,
                                          int64_t K) {
#pragma unroll
  for (int t = 0; t < 2; ++t) {
    const int q = threadIdx.x + t * kThreads;  // 512 chunks of 16 bytes
    if (KMAJOR) {
      const int row = q >> 2, ch = q & 3;
      const int64_t gi = i0 + row, gk = k0 + ch * 8;
      const bool valid = gi < limit && gk < K;
      cp_async16(smem_addr(s + kmajor_at(row, ch * 8)), valid ? base + gi * ld + gk : base, valid);
    } else {
      const int kr = q >> 4, ch = q & 15;
      const int64_t gk = k0 + kr, gi = i0 + ch * 8;
      const bool valid = gk < K && gi < limit;
      cp_async16(smem_addr(s + mnmajor_at(kr, ch * 8)), valid ? base + gk * ld + gi : base, valid);
    }
  }
}

// One tile's GEMM: C[M, N] (+)= A · B over K, with the operands' leading dimensions (the header
// comment's three kinds, expert g's rows r0..r1).
template <class TC>
struct TileProblem {
  int64_t M, N, K, lda, ldb, ldc;
  const bf16 *A, *B;
  TC* C;
};

template <GroupedGemmKind KIND, class TC>
__device__ __forceinline__ TileProblem<TC> tile_problem(const Params& p, int g, int64_t r0, int64_t r1) {
  TileProblem<TC> t;
  if (KIND == GroupedGemmKind::Forward) {
    t.M = r1 - r0, t.N = p.O, t.K = p.I, t.lda = p.I, t.ldb = p.I, t.ldc = p.O;
    t.A = p.a + r0 * p.I;
    t.B = p.b + static_cast<int64_t>(g) * p.O * p.I;
    t.C = static_cast<TC*>(p.c) + r0 * p.O;
  } else if (KIND == GroupedGemmKind::BackwardInput) {
    t.M = r1 - r0, t.N = p.I, t.K = p.O, t.lda = p.O, t.ldb = p.I, t.ldc = p.I;
    t.A = p.a + r0 * p.O;
    t.B = p.b + static_cast<int64_t>(g) * p.O * p.I;
    t.C = static_cast<TC*>(p.c) + r0 * p.I;
  } else {
    t.M = p.O, t.N = p.I, t.K = r1 - r0, t.lda = p.O, t.ldb = p.I, t.ldc = p.I;
    t.A = p.a + r0 * p.O;
    t.B = p.b + r0 * p.I;
    t.C = static_cast<TC*>(p.c) + static_cast<int64_t>(g) * p.O * p.I;
  }
  return t;
}

// The warp's 64×32 block of the accumulator: kMI × kNI m16n8 fragments.
using Accumulator = float[kMI][kNI][4];

// acc += the warp's part of one staged 128×32 A tile times one 32×128 B tile (sa, sb: that stage's
// swizzled tiles); (wm, wn): the warp's place in the 2 × 4 grid.
template <bool A_KMAJOR, bool B_KMAJOR>
__device__ __forceinline__ void mma_stage(Accumulator& acc, const bf16* sa, const bf16* sb, int wm, int wn, int lane) {
#pragma unroll
  for (int ks = 0; ks < kBK / 16; ++ks) {
    uint32_t af[kMI][4], bfr[kNI][2];
#pragma unroll
    for (int mi = 0; mi < kMI; ++mi) {
      const int mbase = wm * kWarpM + mi * 16;
      if (A_KMAJOR) {
        const int row = mbase + (lane % 16), k = ks * 16 + (lane / 16) * 8;
        ldmatrix_x4(af[mi], smem_addr(sa + kmajor_at(row, k)));
      } else {
        const int i = lane / 8, k = ks * 16 + (lane % 8) + (i / 2) * 8, col = mbase + (i % 2) * 8;
        ldmatrix_x4_trans(af[mi], smem_addr(sa + mnmajor_at(k, col)));
      }
    }
#pragma unroll
    for (int ni = 0; ni < kNI; ni += 2) {
      const int nbase = wn * kWarpN + ni * 8, i = lane / 8;
      uint32_t r[4];
      if (B_KMAJOR) {
        const int row = nbase + (lane % 8) + (i / 2) * 8, k = ks * 16 + (i % 2) * 8;
        ldmatrix_x4(r, smem_addr(sb + kmajor_at(row, k)));
      } else {
        const int k = ks * 16 + (lane % 8) + (i % 2) * 8, col = nbase + (i / 2) * 8;
        ldmatrix_x4_trans(r, smem_addr(sb + mnmajor_at(k, col)));
      }
      bfr[ni][0] = r[0];
      bfr[ni][1] = r[1];
      bfr[ni + 1][0] = r[2];
      bfr[ni + 1][1] = r[3];
    }
#pragma unroll
    for (int mi = 0; mi < kMI; ++mi)
#pragma unroll
      for (int ni = 0; ni < kNI; ++ni) mma_bf16(acc[mi][ni], af[mi], bfr[ni][0], bfr[ni][1]);
  }
}

// Writes the block's 128×128 tile at (m0, n0) of t.C through shared memory (sc: fp32 [128][132],
// the pipeline's space, free once every warp has passed the caller's barrier), adding to C when
// a BackwardWeight accumulates; rows past M and columns past N are not written.
template <GroupedGemmKind KIND, class TC>
__device__ __forceinline__ void store_tile(const Accumulator& acc, float* sc, const TileProblem<TC>& t, int64_t m0,
                                           int64_t n0, bool accumulate, int wm, int wn, int lane) {
  const int gid = lane / 4, tig = lane % 4;
#pragma unroll
  for (int mi = 0; mi < kMI; ++mi)
#pragma unroll
    for (int ni = 0; ni < kNI; ++ni) {
      const int r = wm * kWarpM + mi * 16 + gid, c = wn * kWarpN + ni * 8 + 2 * tig;
      *reinterpret_cast<float2*>(sc + r * kCStride + c) = make_float2(acc[mi][ni][0], acc[mi][ni][1]);
      *reinterpret_cast<float2*>(sc + (r + 8) * kCStride + c) = make_float2(acc[mi][ni][2], acc[mi][ni][3]);
    }
  __syncthreads();
  const int col = (threadIdx.x % 16) * 8;
#pragma unroll 4
  for (int row = threadIdx.x / 16; row < kBM; row += kThreads / 16) {
    const int64_t gm = m0 + row, gn = n0 + col;
    if (gm >= t.M || gn >= t.N) continue;
    float v[8];
    const float4 lo = *reinterpret_cast<const float4*>(sc + row * kCStride + col);
    const float4 hi = *reinterpret_cast<const float4*>(sc + row * kCStride + col + 4);
    unpack_f32x8(lo, hi, v);
    TC* dst = t.C + gm * t.ldc + gn;
    if (KIND == GroupedGemmKind::BackwardWeight && accumulate) {
      float old[8];
      load_vec<8>(dst, old);
#pragma unroll
      for (int i = 0; i < 8; ++i) v[i] += old[i];
    }
    store_vec<8>(dst, v);
  }
}

template <GroupedGemmKind KIND, class TC>
__global__ void __launch_bounds__(kThreads, 2) grouped_gemm_mma_kernel(Params p) {
  constexpr bool A_KMAJOR = KIND != GroupedGemmKind::BackwardWeight;
  constexpr bool B_KMAJOR = KIND == GroupedGemmKind::Forward;
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ int s_rows[kMaxLptGroups];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;

  const TileAt at = locate_tile<KIND, kBM>(p.offsets, p.G, p.R, p.tiles_m, p.tiles_n, s_rows);
  if (!at.valid) return;
  const int g = at.g;
  const int64_t m0 = at.m_tile * kBM, n0 = at.n_tile * kBN;
  int64_t r0, r1;
  group_rows(p.offsets, g, p.R, &r0, &r1);
  const TileProblem<TC> t = tile_problem<KIND, TC>(p, g, r0, r1);
  if (KIND == GroupedGemmKind::BackwardWeight && t.K == 0 && p.accumulate) return;  // adds nothing

  bf16* tiles = reinterpret_cast<bf16*>(smem);
  auto stage_a = [&](int s) { return tiles + s * kStageElems; };
  auto stage_b = [&](int s) { return tiles + s * kStageElems + kBM * kBK; };
  auto load_stage = [&](int s, int64_t kt) {
    const int64_t k0 = kt * kBK;
    load_tile<A_KMAJOR>(stage_a(s), t.A, t.lda, m0, t.M, k0, t.K);
    load_tile<B_KMAJOR>(stage_b(s), t.B, t.ldb, n0, t.N, k0, t.K);
  };

  Accumulator acc;
#pragma unroll
  for (int i = 0; i < kMI; ++i)
#pragma unroll
    for (int j = 0; j < kNI; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

  const int wm = warp / (kBN / kWarpN), wn = warp % (kBN / kWarpN);
  const int64_t KT = (t.K + kBK - 1) / kBK;
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < KT) load_stage(s, s);
    cp_async_commit();
  }
  for (int64_t kt = 0; kt < KT; ++kt) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // stage kt has arrived for every thread; stage kt − 1 is no longer read
    const int64_t next = kt + kStages - 1;
    if (next < KT) load_stage(static_cast<int>(next % kStages), next);
    cp_async_commit();
    const int s = static_cast<int>(kt % kStages);
    mma_stage<A_KMAJOR, B_KMAJOR>(acc, stage_a(s), stage_b(s), wm, wn, lane);
  }
  cp_async_wait<0>();
  __syncthreads();  // the pipeline's shared memory becomes the output staging
  store_tile<KIND, TC>(acc, reinterpret_cast<float*>(smem), t, m0, n0, p.accumulate, wm, wn, lane);
}

template <GroupedGemmKind KIND, class TC>
void launch(const Params& prm, int64_t blocks, cudaStream_t stream) {
  auto kernel = grouped_gemm_mma_kernel<KIND, TC>;
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

}  // namespace

bool grouped_gemm_mma_applies(const GroupedGemm& p, const char** why) {
  auto no = [&](const char* reason) {
    if (why) *why = reason;
    return false;
  };
  if (p.ab_type != DType::BF16) return no("the operands are not bf16");
  if (p.c_type != DType::BF16 && p.c_type != DType::F32) return no("the output is neither bf16 nor fp32");
  if (p.O % 8 != 0 || p.I % 8 != 0) return no("O or I is not a multiple of 8");
  if (!aligned16(p.a) || !aligned16(p.b) || !aligned16(p.c)) return no("a tensor is not 16-byte aligned");
  if (p.G > std::numeric_limits<int>::max() / 2) return no("too many experts");
  return true;
}

void grouped_gemm_mma(const GroupedGemm& p, Device device, cudaStream_t stream) {
  const char* why = nullptr;
  if (!grouped_gemm_mma_applies(p, &why))
    TETRA_FAIL(Internal, p.op, " (tensor-core kernel): not applicable: ", why);
  const int64_t N = p.kind == GroupedGemmKind::Forward ? p.O : p.I;
  Params prm{static_cast<const bf16*>(p.a), static_cast<const bf16*>(p.b), p.c, p.offsets, static_cast<int>(p.G), p.R,
             p.O, p.I, static_cast<int>((N + kBN - 1) / kBN), static_cast<int>((p.O + kBM - 1) / kBM), p.accumulate};
  int64_t blocks;
  if (p.kind == GroupedGemmKind::BackwardWeight) {
    blocks = p.G * prm.tiles_m * prm.tiles_n;
  } else {
    blocks = ((p.R + kBM - 1) / kBM + p.G) * prm.tiles_n;
  }
  if (blocks == 0) return;
  if (blocks > std::numeric_limits<int>::max())
    TETRA_FAIL(Internal, p.op, " (tensor-core kernel): ", blocks, " tiles exceed one grid");
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
  (void)device;
}

}  // namespace tetra::cuda
