// The warp-specialised Hopper grouped GEMM on FP8 codes (runtime/cuda/moe_grouped_gemm.h,
// grouped_gemm_fp8_wgmma): the bf16 kernel's structure (moe_grouped_gemm_ws_sm90a.cu; one producer
// warpgroup, two consumer warpgroups, an mbarrier ring over the block's k-tiles) with FP8 wgmma.
// FP8 wgmma reads both operands K-major from shared memory (8-bit types have no transpose), so the
// casts write the transposed layouts (GroupedGemm::fp8_transposed): every operand is a 2-D tensor
// of codes whose rows run along K, loaded by the bulk tensor copy engine in boxes of 128 codes
// (the 128-byte swizzle span) × 128 rows.
//
//   block: 384 threads, persistent (one per SM, never more than tiles), tiles of the shared list.
//   tile:  two shapes (TileShape; which kinds take which: grouped_gemm_fp8_fast_accumulation).
//          Promoted: 128 × 128 outputs, consumer c owns rows 64c … 64c + 63 (wgmma m64n128k32, 64 fp32
//          accumulators a thread); 6 stages of 32 KB (5 or 4 beside the tensor-store epilogue);
//          each k-tile (128 codes of K, four k32 wgmmas) sums into a second register set started at
//          zero (scale-d 0), waited for and added into the tile's accumulators in fp32: the tensor
//          cores' FP8 accumulation keeps fewer mantissa bits than fp32, and promoting every 128
//          products bounds that error by the k-tile's sum rather than the whole K (DeepSeek-V3,
//          §3.3.2). (Two such sets taking turns, so that the next k-tile's wgmmas run while one is
//          added, ran no faster; clusters of two blocks sharing B by multicast ran 1.5–2.5× slower:
//          docs/kernels.md, FP8 training v12.)
//          Fast: 128 × 256 outputs (m64n256k32, 128 accumulators), 4 stages of 48 KB (3 beside the
//          tensor-store epilogue); the tensor cores accumulate the whole K and a k-tile's wgmmas
//          overlap the previous one's, as in the bf16 kernel. Half the L2 bytes per FLOP of the
//          promoted tile.
//   K tails: Forward (K = I) and BackwardInput (K = O) read zeros past the tensor's inner extent;
//          BackwardWeight's K ranges are whole k-tiles of zero-padded codes. Rows past an expert's
//          end (the next expert's) and columns past N make outputs that are never stored.
//   epilogue: expert g's sums times a_scale[g]·b_scale[g], stored (or added, BackwardWeight
//          accumulating) as bf16 or fp32: each thread's own stores (TETRA_GROUPED_EPILOGUE=direct),
//          or (auto, the default, or staged) a whole 64-row slice through a buffer a consumer in shared
//          memory that the copy engine stores as tensor boxes while the consumer goes on to its next
//          tile's k-tiles (store_slice_tma; fewer stages beside the buffers, staged_stages; slices
//          cut by an expert's end, a weight gradient accumulating, and the fast shape's fp32 outputs
//          keep the direct stores).
//   blockwise (GroupedGemm::blockwise; DeepSeek-V3's 1×128 / 128×128 scales): the promoted tile, each
//          k-tile's sums multiplied by their two per-128 scales as they are added (the k-tile is one
//          scale block of K), no scale in the epilogue.
// Stage s serves k-tiles s, s + S, … (S stages): k-tile i is phase i / S of full[s] and empty[s]; a
// consumer releases a stage as soon as its wgmmas on it have completed (one arrival per consumer warp: 8).
// Compiled for sm_90a only; elsewhere the kernel is absent and grouped_gemm_fp8_wgmma_applies says no.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <utility>

#include "runtime/cuda/device_context.h"
#include "runtime/cuda/moe_grouped_wgmma.cuh"
#include "runtime/fp8_format.h"
#include "runtime/ops.h"

namespace tetra::cuda {

namespace {

using namespace wgmma;
using u8 = unsigned char;

constexpr int kBM = 128, kFp8BK = 128;
constexpr int kThreads = 3 * 128;

// The two tile shapes. Promoted (FAST false): 128 × 128, each k-tile's wgmmas summed into a second
// register set and added into the accumulators in fp32 (64 + 64 registers a thread). Fast: 128 × 256,
// the tensor cores accumulate the whole K (Hopper's fast accumulation, as cuBLASLt's FAST_ACCUM),
// one register set of 128, and the wgmmas of consecutive k-tiles overlap (the bf16 kernel's scheme).
// A 128 × 128 FP8 tile moves 32 KB from L2 per 4.2 MFLOP; on one H200 it measured ≈ 450 TFLOP/s,
// below the bf16 kernel: L2 feeds it too slowly. 128 × 256 halves the bytes per FLOP.
// STAGES: the ring's stages (6 and 4 with the direct epilogue; fewer beside the tensor-store
// epilogue's two buffers, staged_stages).
template <bool FAST, int STAGES = FAST ? 4 : 6>
struct TileShape {
  static constexpr int kBN = FAST ? 256 : 128;
  static constexpr int kStages = STAGES;
  static constexpr int kAStageBytes = kBM * kFp8BK, kBStageBytes = kBN * kFp8BK;
  static constexpr int kStageBytes = kAStageBytes + kBStageBytes;
  static constexpr size_t kSmemBytes = static_cast<size_t>(kStages) * kStageBytes + 1024;  // + alignment
  static constexpr int kAcc = kBN / 2;  // fp32 accumulators a thread (m64nBNk32)
};
// How a kernel runs its k-tiles: the fast shape, or the promoted one (each k-tile waited for and
// added), with the tensorwise scales applied once in the epilogue or (PromotedBlockwise) each k-tile's
// blockwise scales applied as it is added.
enum class Mainloop { Fast, Promoted, PromotedBlockwise };
template <Mainloop ML>
using ShapeOf = TileShape<ML == Mainloop::Fast>;

// Both shapes need the same shared memory within a few KB; the larger one decides whether a device fits.
constexpr size_t kSmemBytes = std::max(TileShape<false>::kSmemBytes, TileShape<true>::kSmemBytes);

// The tensor-store epilogue (store_slice_tma; the default, TETRA_GROUPED_EPILOGUE=direct turns it
// off): its two buffers (one a consumer) after the ring, which keeps as many stages as fit beside
// them in 220 KB (227 KB a block, less the static tables): promoted bf16 5, promoted fp32 4, fast
// bf16 3; the fast shape's fp32 outputs would leave 1 and keep the direct stores.
template <Mainloop ML, class TC>
constexpr size_t staged_epilogue_bytes() {
  return 2 * static_cast<size_t>(tma_slice_bytes<ShapeOf<ML>::kBN, TC>());
}
template <Mainloop ML, class TC>
constexpr int staged_stages() {
  using D = ShapeOf<ML>;
  const size_t room = 220 * 1024 - 1024 - staged_epilogue_bytes<ML, TC>();
  return static_cast<int>(std::min<size_t>(D::kStages, room / D::kStageBytes));
}
template <Mainloop ML, class TC>
constexpr bool staged_fits() {
  return staged_stages<ML, TC>() >= 3;
}
// The kernel's tile shape: the direct epilogue's, or the staged one's fewer stages.
template <Mainloop ML, class TC, bool STAGED>
using KernelShape = std::conditional_t<STAGED, TileShape<ML == Mainloop::Fast, staged_stages<ML, TC>()>, ShapeOf<ML>>;
template <Mainloop ML, class TC, bool STAGED>
constexpr size_t kernel_smem_bytes() {
  return KernelShape<ML, TC, STAGED>::kSmemBytes + (STAGED ? staged_epilogue_bytes<ML, TC>() : 0);
}

struct Maps {
  CUtensorMap a, b;
  CUtensorMap c;  // the output, for the tensor-store epilogue only (boxes of 128 bytes × 64 rows)
};

#ifdef TETRA_WGMMA

// d[0..63] = A(64×32)·B(32×128) (+ d when accumulate) for this warpgroup, both K-major; the formats'
// PTX names in AT and BT.
#define TETRA_WGMMA_FP8_M64N128K32(AT, BT)                                                                    \
  asm volatile(                                                                                               \
      "{\n"                                                                                                   \
      ".reg .pred p;\n"                                                                                       \
      "setp.ne.b32 p, %66, 0;\n"                                                                              \
      "wgmma.mma_async.sync.aligned.m64n128k32.f32." AT "." BT " {"                                           \
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"                                 \
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"                       \
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"                       \
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63},"                      \
      " %64, %65, p, 1, 1;\n"                                                                                 \
      "}\n"                                                                                                   \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),       \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),   \
      "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
      "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
      "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
      "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
      "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
      "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])  \
      : "l"(desc_a), "l"(desc_b), "r"(accumulate ? 1 : 0))

#define TETRA_WGMMA_FP8_M64N256K32(AT, BT)                                                                    \
  asm volatile(                                                                                               \
      "{\n"                                                                                                   \
      ".reg .pred p;\n"                                                                                       \
      "setp.ne.b32 p, %130, 0;\n"                                                                             \
      "wgmma.mma_async.sync.aligned.m64n256k32.f32." AT "." BT " {"                                           \
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"                                 \
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"                       \
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"                       \
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63,"                       \
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79,"                       \
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95,"                       \
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111,"           \
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127},"      \
      " %128, %129, p, 1, 1;\n"                                                                               \
      "}\n"                                                                                                   \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),       \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),   \
      "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
      "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
      "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
      "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
      "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
      "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), \
      "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
      "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), \
      "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), \
      "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), \
      "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]),           \
      "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]),      \
      "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]),      \
      "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]),      \
      "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])                                                  \
      : "l"(desc_a), "l"(desc_b), "r"(accumulate ? 1 : 0))

// The wgmma of a tile shape: m64n128k32 (64 accumulators) or m64n256k32 (128).
template <Fp8Format AF, Fp8Format BF, int N>
__device__ __forceinline__ void wgmma_fp8(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b, bool accumulate) {
  static_assert(BF == Fp8Format::E4M3, "B is E4M3");
  static_assert(N == 128 || N == 256, "m64n128k32 or m64n256k32");
  if constexpr (N == 128) {
    if constexpr (AF == Fp8Format::E4M3) TETRA_WGMMA_FP8_M64N128K32("e4m3", "e4m3");
    else TETRA_WGMMA_FP8_M64N128K32("e5m2", "e4m3");
  } else {
    if constexpr (AF == Fp8Format::E4M3) TETRA_WGMMA_FP8_M64N256K32("e4m3", "e4m3");
    else TETRA_WGMMA_FP8_M64N256K32("e5m2", "e4m3");
  }
}

#undef TETRA_WGMMA_FP8_M64N128K32
#undef TETRA_WGMMA_FP8_M64N256K32

#endif  // TETRA_WGMMA

#ifdef TETRA_WGMMA

__device__ __forceinline__ void prefetch_l1(const float* p) { asm volatile("prefetch.global.L1 [%0];\n" ::"l"(p)); }

// A consumer warp's release of stage s (k-tile i) to the producer: one arrival a warp (empty[s]
// counts the 8 consumer warps).
template <int STAGES>
struct StageRelease {
  uint64_t* empty;
  __device__ __forceinline__ void operator()(int i) const { mbarrier_arrive(smem_addr(&empty[i % STAGES])); }
};

// One k-tile: waits for its stage (k-tile i) and issues its four wgmmas into acc, committed as one
// group; nothing waits for them here. fresh: the first starts acc at zero (the promoted shape's
// partial sums), else all add into it (the fast shape's accumulators).
template <Fp8Format AF, class S, class StageA, class StageB>
__device__ __forceinline__ void issue_k_tile(float (&acc)[S::kAcc], int i, uint64_t* full, StageA a, StageB b,
                                             bool fresh) {
  const int s = static_cast<int>(i % S::kStages);
  mbarrier_wait(smem_addr(&full[s]), static_cast<uint32_t>((i / S::kStages) & 1));
  __syncwarp();  // converged again for the .aligned wgmma instructions
  wgmma_fence();
#pragma unroll
  for (int ks = 0; ks < kFp8BK / 32; ++ks)
    wgmma_fp8<AF, Fp8Format::E4M3, S::kBN>(acc, desc_rows<true>(a(s), 0, ks), desc_rows<true>(b(s), 0, ks),
                                           !fresh || ks > 0);
  wgmma_commit();
}

// k-tile i's sums, whose wgmmas have completed, added into d in fp32; its stage released.
template <class Release>
__device__ __forceinline__ void promote(float (&d)[TileShape<false>::kAcc], float (&part)[TileShape<false>::kAcc],
                                        int i, const Release& release) {
  using S = TileShape<false>;
#pragma unroll
  for (int r = 0; r < S::kAcc; ++r) fence_operand(part[r]);
  if (threadIdx.x % 32 == 0) release(i);
#pragma unroll
  for (int r = 0; r < S::kAcc; ++r) d[r] += part[r];
}

// The promoted shape's k-tiles i0 … i0 + KT − 1 (KT ≥ 1) into d: each k-tile's wgmmas waited for,
// then promoted.
template <Fp8Format AF, class S, class Release, class StageA, class StageB>
__device__ __forceinline__ void consume_promoted(float (&d)[S::kAcc], int i0, int KT, uint64_t* full,
                                                 const Release& release, StageA a, StageB b) {
  float p0[S::kAcc];
  for (int i = i0; i < i0 + KT; ++i) {
    issue_k_tile<AF, S>(p0, i, full, a, b, true);
    wgmma_wait<0>();
    promote(d, p0, i, release);
  }
}

// Blockwise: where this thread finds the two scales of each of its accumulators (GroupedGemm::blockwise),
// for one tile. A thread of a consumer warpgroup holds rows 16·w + lane/4 (+8) of its 64 and columns
// 8j + 2·(lane mod 4) (+1) of the tile's 128 (store_slice's layout).
template <GroupedGemmKind KIND>
struct BlockScales {
  static constexpr bool kWeightGrad = KIND == GroupedGemmKind::BackwardWeight;
  const float* a;    // A's scales at this thread's k-block 0: a[kb·a_ld + row_h] for its rows
  const float* b;    // B's: the tile's weight block's row (forward, input gradient), else xᵀ's at col0
  int64_t a_ld, b_ld;
  int64_t row[2];

  __device__ __forceinline__ BlockScales(const ParamsT<unsigned char>& p, const TileT<unsigned char>& T, int consumer) {
    const int w = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32;
    const int64_t first = T.m0 + 64 * consumer + 16 * w + lane / 4;
    a_ld = p.a_scale_ld, b_ld = p.b_scale_ld;
    if constexpr (kWeightGrad) {  // rows are dyᵀ's (O, a multiple of 128: all real); k-blocks from T.r0
      const int64_t kb0 = T.r0 / kFp8BK;
      row[0] = first, row[1] = first + 8;
      a = p.a_scale + kb0 * a_ld;
      b = p.b_scale + kb0 * b_ld + T.n0 + 2 * (lane % 4);
    } else {  // the expert's rows; those past the tensor (never stored) read the last row's scale
      const int64_t last = p.R - 1;
      row[0] = T.r0 + first < last ? T.r0 + first : last;
      row[1] = T.r0 + first + 8 < last ? T.r0 + first + 8 : last;
      a = p.a_scale;
      if constexpr (KIND == GroupedGemmKind::Forward)  // w's blocks: expert g's n-block rows, k-blocks along
        b = p.b_scale + (static_cast<int64_t>(T.g) * (T.N / kFp8BK) + T.n0 / kFp8BK) * b_ld;
      else  // the stack's transposed blocks: n-block row n0/128, expert g's k-blocks from column g·O/128
        b = p.b_scale + (T.n0 / kFp8BK) * b_ld + static_cast<int64_t>(T.g) * (p.O / kFp8BK);
    }
  }
};

// One k-tile's blockwise scales of this thread's accumulators: its two rows' (fa) and, for column
// pair j, the columns' (fb[j]; the forward's and input gradient's one block scale in both halves).
template <GroupedGemmKind KIND>
struct KTileScales {
  float fa[2];
  float2 fb[TileShape<false>::kBN / 8];

  __device__ __forceinline__ void load(const BlockScales<KIND>& sc, int kt) {
    const float* sa = sc.a + kt * sc.a_ld;
    fa[0] = sa[sc.row[0]], fa[1] = sa[sc.row[1]];
    if constexpr (BlockScales<KIND>::kWeightGrad) {
#pragma unroll
      for (int j = 0; j < TileShape<false>::kBN / 8; ++j)
        fb[j] = *reinterpret_cast<const float2*>(sc.b + kt * sc.b_ld + 8 * j);
    } else {
      const float one = sc.b[kt];
#pragma unroll
      for (int j = 0; j < TileShape<false>::kBN / 8; ++j) fb[j] = make_float2(one, one);
    }
  }
};

// The promoted shape's k-tiles i0 … i0 + KT − 1 into d, each k-tile's sums multiplied by their
// blockwise scales as they are added: d += part · sa[row] · sb (sb one block's for the forward and
// input gradient, a column's for the weight gradient). The next k-tile's scales are loaded as soon
// as this one's are used, so that their L2 latency passes while the consumer waits for its stage and
// its wgmmas run.
template <Fp8Format AF, class S, GroupedGemmKind KIND, class Release, class StageA, class StageB>
__device__ __forceinline__ void consume_promoted_blockwise(float (&d)[S::kAcc], int i0, int KT, uint64_t* full,
                                                           const Release& release, StageA a, StageB b,
                                                           const BlockScales<KIND>& sc) {
  float part[S::kAcc];
  KTileScales<KIND> f;
  f.load(sc, 0);
  for (int kt = 0; kt < KT; ++kt) {
    const int i = i0 + kt;
    issue_k_tile<AF, S>(part, i, full, a, b, true);
    wgmma_wait<0>();
#pragma unroll
    for (int r = 0; r < S::kAcc; ++r) fence_operand(part[r]);
    if (threadIdx.x % 32 == 0) release(i);
#pragma unroll
    for (int j = 0; j < S::kBN / 8; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        d[4 * j + 2 * h] += part[4 * j + 2 * h] * (f.fa[h] * f.fb[j].x);
        d[4 * j + 2 * h + 1] += part[4 * j + 2 * h + 1] * (f.fa[h] * f.fb[j].y);
      }
    if (kt + 1 < KT) f.load(sc, kt + 1);
  }
}

// A consumer's k-tiles i0 … i0 + KT − 1 of the block's sequence into d (started at zero), stage s of
// k-tile i released (release(i), StageRelease) once its wgmmas have completed. `a` and `b` give a
// stage's A slice (this consumer's 64 rows) and B tile addresses.
template <Fp8Format AF, Mainloop ML, class S, class Release, class StageA, class StageB>
__device__ __forceinline__ void consume_tiles(float (&d)[S::kAcc], int i0, int KT, uint64_t* full,
                                              const Release& release, StageA a, StageB b) {
  if constexpr (ML == Mainloop::Promoted) {
    consume_promoted<AF, S>(d, i0, KT, full, release, a, b);
  } else {
    // accumulate across k-tiles in the tensor cores; the previous k-tile's stage is released once its
    // wgmmas are done, while this one's run
    const int lane = threadIdx.x % 32;
    for (int kt = 0, i = i0; kt < KT; ++kt, ++i) {
      issue_k_tile<AF, S>(d, i, full, a, b, false);
      wgmma_wait<1>();
#pragma unroll
      for (int r = 0; r < S::kAcc; ++r) fence_operand(d[r]);
      if (kt > 0 && lane == 0) release(i - 1);
    }
    wgmma_wait<0>();
#pragma unroll
    for (int r = 0; r < S::kAcc; ++r) fence_operand(d[r]);
    if (KT > 0 && lane == 0) release(i0 + KT - 1);
  }
}

// A weight-gradient tile of an expert without rows adds nothing to an accumulated gradient: skipped
// (by every role and block alike, so that the k-tile sequences agree).
template <GroupedGemmKind KIND>
__device__ __forceinline__ bool skipped(const ParamsT<u8>& p, int KT) {
  return KIND == GroupedGemmKind::BackwardWeight && KT == 0 && p.accumulate;
}

// The producer thread: every k-tile of the block's tiles (first, first + step, … < total) into the
// ring of stages at `base` (A then B in each), a stage once both consumers have released it.
template <GroupedGemmKind KIND, Mainloop ML, class S>
__device__ __forceinline__ void produce(const ParamsT<u8>& p, const Maps& maps, const int* table, int first,
                                        int step, int total, uint64_t* full, uint64_t* empty, uint32_t base) {
  constexpr bool BW = KIND == GroupedGemmKind::BackwardWeight;
  // Blockwise input gradient: B is the whole stack's transposed codes [I, G·O], expert g's wᵀ at
  // columns g·O (GroupedGemm::blockwise)
  constexpr bool kStackT = ML == Mainloop::PromotedBlockwise && KIND == GroupedGemmKind::BackwardInput;
  int i = 0;  // k-tiles issued (a block issues fewer than 2^31)
  for (int t = first; t < total; t += step) {
    const TileT<u8> L = tile_info<KIND, kBM, S::kBN>(p, table, t);
    const int KT = static_cast<int>((L.K + kFp8BK - 1) / kFp8BK);
    if (skipped<KIND>(p, KT)) continue;
    // (k, row) of the boxes: A's rows are the expert's rows (M) or dyᵀ's (O); B's the stacked
    // weights' w[g] [O, I] or w[g]ᵀ [I, O] rows (N of them per expert), or xᵀ's (I). A block past
    // its expert's rows (the next expert's) loads and multiplies rows it never stores.
    const int a_row = static_cast<int>(BW ? L.m0 : L.r0 + L.m0);
    const int b_row = static_cast<int>(BW || kStackT ? L.n0 : static_cast<int64_t>(L.g) * L.N + L.n0);
    const int64_t k_origin = BW ? L.r0 : 0;
    const int64_t b_k_origin = kStackT ? static_cast<int64_t>(L.g) * p.O : k_origin;
    for (int kt = 0; kt < KT; ++kt, ++i) {
      const int s = static_cast<int>(i % S::kStages);
      const uint32_t parity = static_cast<uint32_t>((i / S::kStages - 1) & 1);
      if (i >= S::kStages) mbarrier_wait(smem_addr(&empty[s]), parity);
      const uint32_t bar = smem_addr(&full[s]);
      mbarrier_arrive_expect_tx(bar, S::kStageBytes);  // A and B
      const uint32_t a_stage = base + static_cast<uint32_t>(s * S::kStageBytes);
      tma_load_2d(a_stage, &maps.a, static_cast<int>(k_origin + kt * kFp8BK), a_row, bar);
      tma_load_2d(a_stage + S::kAStageBytes, &maps.b, static_cast<int>(b_k_origin + kt * kFp8BK), b_row, bar);
    }
  }
}

#endif  // TETRA_WGMMA

template <GroupedGemmKind KIND, Fp8Format AF, class TC, Mainloop ML, bool STAGED>
__global__ void __launch_bounds__(kThreads, 1)
    grouped_gemm_fp8_kernel(ParamsT<u8> p, const __grid_constant__ Maps maps) {
#ifdef TETRA_WGMMA
  using S = KernelShape<ML, TC, STAGED>;
  extern __shared__ unsigned char smem_raw[];
  __shared__ int table[kMaxTableGroups + 1];
  __shared__ int rows[kMaxLptGroups];
  __shared__ alignas(8) uint64_t full[S::kStages], empty[S::kStages];
  const int total = static_cast<int>(build_tile_table<KIND, kBM>(p, table, rows));  // < 2^31 (the table's ints)
  if (threadIdx.x == 0) {
    for (int s = 0; s < S::kStages; ++s) {
      mbarrier_init(smem_addr(&full[s]), 1);
      mbarrier_init(smem_addr(&empty[s]), 8);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");  // visible to the copy engine
  }
  __syncthreads();
  // this block's tiles: first, first + step, …
  const int first = static_cast<int>(blockIdx.x), step = static_cast<int>(gridDim.x);

  // 1024-byte aligned stages (the swizzle pattern repeats every 1024 bytes of address)
  const uint32_t base = (smem_addr(smem_raw) + 1023u) & ~1023u;
  auto a_stage = [&](int s) { return base + static_cast<uint32_t>(s * S::kStageBytes); };
  auto b_stage = [&](int s) { return base + static_cast<uint32_t>(s * S::kStageBytes + S::kAStageBytes); };

  const int role = threadIdx.x / 128;  // 0: producer; 1, 2: consumers
  if (role == 0) {
    // registers to the consumers (128 accumulators, or 64 twice when promoting, and the epilogue's
    // addresses): 128·56 + 256·224 ≤ 65536
    asm volatile("setmaxnreg.dec.sync.aligned.u32 56;\n" ::: "memory");
    if (threadIdx.x == 0) produce<KIND, ML, S>(p, maps, table, first, step, total, full, empty, base);
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 224;\n" ::: "memory");
    const int consumer = role - 1;
    const StageRelease<S::kStages> release{empty};
    float d[S::kAcc];
    int i = 0;  // k-tiles of the block's sequence before the current one
    for (int t = first; t < total; t += step) {
      const TileT<u8> T = tile_info<KIND, kBM, S::kBN>(p, table, t);
      const int KT = static_cast<int>((T.K + kFp8BK - 1) / kFp8BK);
      if (skipped<KIND>(p, KT)) continue;
      constexpr bool kBlockwise = ML == Mainloop::PromotedBlockwise;
      if (!kBlockwise) {  // the expert's scales brought into L1 while the k-tiles run (loaded after them)
        prefetch_l1(p.a_scale + T.g);
        prefetch_l1(p.b_scale + T.g);
      }
#pragma unroll
      for (int r = 0; r < S::kAcc; ++r) d[r] = 0.0f;
      auto a_slice = [&](int s) { return a_stage(s) + static_cast<uint32_t>(64 * consumer * 128); };
      if constexpr (kBlockwise) {
        if (KT > 0) consume_promoted_blockwise<AF, S>(d, i, KT, full, release, a_slice, b_stage,
                                                      BlockScales<KIND>(p, T, consumer));
      } else {
        if (KT > 0)  // (only a weight gradient of an expert without rows has none: zeros stored)
          consume_tiles<AF, ML, S>(d, i, KT, full, release, a_slice, b_stage);
        const float scale = p.a_scale[T.g] * p.b_scale[T.g];
#pragma unroll
        for (int r = 0; r < S::kAcc; ++r) d[r] *= scale;
      }
      i += KT;
      store_consumer_slice<KIND, S::kBN, TC, STAGED>(p, &maps.c, T, d, base + S::kStages * S::kStageBytes, consumer,
                                                     1 + consumer);
    }
    if constexpr (STAGED) {
      if (threadIdx.x % 128 == 0) bulk_wait();  // the last slice's stores, before the block ends
    }
  }
#endif  // TETRA_WGMMA
}

// A persistent grid: one block an SM, at most one per tile.
template <GroupedGemmKind KIND, Fp8Format AF, class TC, Mainloop ML, bool STAGED>
void launch_epilogue(const ParamsT<u8>& prm, const Maps& maps, int64_t tiles, Device device, cudaStream_t stream) {
  auto kernel = grouped_gemm_fp8_kernel<KIND, AF, TC, ML, STAGED>;
  constexpr size_t smem = kernel_smem_bytes<ML, TC, STAGED>();
  allow_dynamic_smem(kernel, smem);
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>(tiles, sm_count(device)));
  kernel<<<grid, kThreads, smem, stream>>>(prm, maps);
  TETRA_CUDA_CHECK_LAUNCH();
}

template <GroupedGemmKind KIND, Fp8Format AF, class TC, Mainloop ML>
void launch(const GroupedGemm& p, const ParamsT<u8>& prm, const Maps& maps, int64_t tiles, Device device,
            cudaStream_t stream) {
  if constexpr (staged_fits<ML, TC>()) {
    constexpr size_t smem = kernel_smem_bytes<ML, TC, true>();
    if (grouped_gemm_fp8_staged_epilogue() && device_fits(smem, nullptr)) {
      Maps with_output = maps;
      with_output.c = output_map<TC>(p, "wgmma FP8 kernel");
      return launch_epilogue<KIND, AF, TC, ML, true>(prm, with_output, tiles, device, stream);
    }
  }
  launch_epilogue<KIND, AF, TC, ML, false>(prm, maps, tiles, device, stream);
}

template <GroupedGemmKind KIND, class TC, Mainloop ML>
void launch_format(const GroupedGemm& p, const ParamsT<u8>& prm, const Maps& maps, int64_t tiles, Device device,
                   cudaStream_t stream) {
  if (p.ab_type == DType::F8E4M3) return launch<KIND, Fp8Format::E4M3, TC, ML>(p, prm, maps, tiles, device, stream);
  launch<KIND, Fp8Format::E5M2, TC, ML>(p, prm, maps, tiles, device, stream);
}

// A 2-D tensor of codes [outer, inner] in boxes of 128 codes × box_outer rows.
CUtensorMap code_map(const char* op, const void* base, int64_t inner, int64_t outer, int box_outer) {
  return tensor_map(op, "wgmma FP8 kernel", base, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, inner, outer, box_outer);
}

// TETRA_FP8_GROUPED_ACCUM: which kinds accumulate in the tensor cores over the whole K (the 128 × 256
// tile) instead of promoting every k-tile: "forward" (the default, as the dense projections, whose
// forward GEMMs take cuBLASLt's fast accumulation), "all" or "none".
enum class FastKinds { Forward, All, None };

FastKinds fast_kinds() {
  static const FastKinds kinds = [] {
    const char* v = std::getenv("TETRA_FP8_GROUPED_ACCUM");
    const std::string s = v ? v : "";
    if (s.empty() || s == "forward") return FastKinds::Forward;
    if (s == "all") return FastKinds::All;
    if (s == "none") return FastKinds::None;
    TETRA_FAIL(Config, "TETRA_FP8_GROUPED_ACCUM=", s, ": want forward, all or none");
  }();
  return kinds;
}

template <Mainloop ML>
void run_shape(const GroupedGemm& p, Device device, cudaStream_t stream) {
  using S = ShapeOf<ML>;
  const bool bw = p.kind == GroupedGemmKind::BackwardWeight;
  const int64_t N = p.kind == GroupedGemmKind::Forward ? p.O : p.I;
  ParamsT<u8> prm{static_cast<const u8*>(p.a), static_cast<const u8*>(p.b), p.c, p.offsets, static_cast<int>(p.G), p.R,
                  p.O, p.I, static_cast<int>((p.O + kBM - 1) / kBM),
                  static_cast<int>((N + S::kBN - 1) / S::kBN), p.accumulate, p.a_scale, p.b_scale,
                  bw ? p.padded_offsets : nullptr, p.a_scale_ld, p.b_scale_ld};
  // A's boxes: a block's 128 rows; B's: the tile's kBN rows
  Maps maps{};
  if (p.kind == GroupedGemmKind::Forward) {  // x [R, I], w [G·O, I]
    maps.a = code_map(p.op, p.a, p.I, p.R, kBM);
    maps.b = code_map(p.op, p.b, p.I, p.G * p.O, S::kBN);
  } else if (p.kind == GroupedGemmKind::BackwardInput) {  // dy [R, O], wᵀ [G·I, O] (blockwise: [I, G·O])
    maps.a = code_map(p.op, p.a, p.O, p.R, kBM);
    maps.b = p.blockwise ? code_map(p.op, p.b, p.G * p.O, p.I, S::kBN) : code_map(p.op, p.b, p.O, p.G * p.I, S::kBN);
  } else {  // dyᵀ [O, Rp], xᵀ [I, Rp]
    maps.a = code_map(p.op, p.a, p.Rp, p.O, kBM);
    maps.b = code_map(p.op, p.b, p.Rp, p.I, S::kBN);
  }
  const int64_t tiles = tile_bound(p, prm.tiles_m, prm.tiles_n, kBM);
  if (tiles == 0) return;
  auto by_output = [&](auto tc) {
    using TC = decltype(tc);
    switch (p.kind) {
      case GroupedGemmKind::Forward:
        return launch_format<GroupedGemmKind::Forward, TC, ML>(p, prm, maps, tiles, device, stream);
      case GroupedGemmKind::BackwardInput:
        return launch_format<GroupedGemmKind::BackwardInput, TC, ML>(p, prm, maps, tiles, device, stream);
      case GroupedGemmKind::BackwardWeight:
        return launch_format<GroupedGemmKind::BackwardWeight, TC, ML>(p, prm, maps, tiles, device, stream);
    }
  };
  if (p.c_type == DType::BF16) by_output(bf16{});
  else by_output(float{});
}

}  // namespace

// The casts ahead (ops::moe_grouped_fp8_cast) pad by the op library's rule: the same 128.
static_assert(kFp8BK == ops::kFp8Block);
int64_t grouped_gemm_fp8_padded_rows(int64_t R, int64_t G) { return ops::moe_grouped_fp8_padded_rows(R, G); }

bool grouped_gemm_fp8_wgmma_applies(const GroupedGemm& p, const char** why) {
  auto no = [&](const char* reason) {
    if (why) *why = reason;
    return false;
  };
#if !defined(TETRA_HAVE_SM90A)
  return no("tetra was built without sm_90a code (CMAKE_CUDA_ARCHITECTURES must include 90a)");
#endif
  if ((p.ab_type != DType::F8E4M3 && p.ab_type != DType::F8E5M2) || p.b_fp8 != DType::F8E4M3)
    return no("the operands are not E4M3 × E4M3 or E5M2 × E4M3 codes");
  if (!p.a_scale || !p.b_scale) return no("the scales are missing");
  if (p.c_type != DType::BF16 && p.c_type != DType::F32) return no("the output is neither bf16 nor fp32");
  if (p.O % 16 != 0 || p.I % 16 != 0) return no("O or I is not a multiple of 16 (the copy engine's 16-byte strides)");
  if (p.blockwise && (p.O % kFp8BK != 0 || p.I % kFp8BK != 0))
    return no("blockwise scales need O and I multiples of 128 (whole weight blocks a tile)");
  if (!aligned16(p.c)) return no("the output is not 16-byte aligned");
  if (p.G > kMaxTableGroups) return no("more than 1024 experts in one call");
  // TMA coordinates are 32-bit; the transposing casts' grids have up to Rp / 32 rows of blocks (their
  // vector kernels' 32-row tiles), and a weight's O or I / 32
  const int64_t Rp = grouped_gemm_fp8_padded_rows(p.R, p.G);
  if (Rp >= (int64_t{1} << 31) || p.G * p.O >= (int64_t{1} << 31) || p.G * p.I >= (int64_t{1} << 31) ||
      Rp / 32 > 65535 || (p.O + 31) / 32 > 65535 || (p.I + 31) / 32 > 65535)
    return no("an operand has too many rows for the copy engine's coordinates");
  // the kernel counts tiles in ints: at most (smallest tiles) every weight gradient's or row tile's
  const int64_t o_tiles = (p.O + kBM - 1) / kBM, i_tiles = (p.I + kBM - 1) / kBM;
  const int64_t kIntTiles = int64_t{1} << 31;
  if (p.G * o_tiles * i_tiles >= kIntTiles || (Rp / kBM + p.G) * std::max(o_tiles, i_tiles) >= kIntTiles)
    return no("more than 2^31 output tiles in one call");
  static const bool fits = device_fits(kSmemBytes, nullptr);
  if (!fits) {
    device_fits(kSmemBytes, why);
    return false;
  }
  if (encode_tiled() == nullptr) return no("the driver has no cuTensorMapEncodeTiled");
  return true;
}

bool grouped_gemm_fp8_fast_accumulation(GroupedGemmKind kind) {
  const FastKinds k = fast_kinds();
  return k == FastKinds::All || (k == FastKinds::Forward && kind == GroupedGemmKind::Forward);
}

bool grouped_gemm_fp8_tensor_cores(const GroupedGemm& p) {
  return grouped_gemm_impl() != GroupedGemmImpl::Simt && grouped_gemm_fp8_wgmma_applies(p, nullptr);
}

void grouped_gemm_fp8_wgmma(const GroupedGemm& p, Device device, cudaStream_t stream) {
  const char* why = nullptr;
  if (!grouped_gemm_fp8_wgmma_applies(p, &why))
    TETRA_FAIL(Internal, p.op, " (wgmma FP8 kernel): not applicable: ", why);
  const bool bw = p.kind == GroupedGemmKind::BackwardWeight;
  if (!p.fp8_transposed || !aligned16(p.a) || !aligned16(p.b) || (bw && (!p.padded_offsets || p.Rp <= 0)))
    TETRA_FAIL(Internal, p.op, " (wgmma FP8 kernel): the operands are not 16-byte aligned codes in its layouts");
  if (p.R == 0) {  // no rows: the weight gradient is zero or unchanged
    if (bw && !p.accumulate)
      TETRA_CUDA_CHECK(cudaMemsetAsync(p.c, 0, static_cast<size_t>(p.G * p.O * p.I) * dtype_size(p.c_type), stream));
    return;
  }
  if (p.blockwise) {
    if (p.a_scale_ld <= 0 || p.b_scale_ld <= 0)
      TETRA_FAIL(Internal, p.op, " (wgmma FP8 kernel): blockwise scales without their row strides");
    run_shape<Mainloop::PromotedBlockwise>(p, device, stream);
  } else if (grouped_gemm_fp8_fast_accumulation(p.kind)) run_shape<Mainloop::Fast>(p, device, stream);
  else run_shape<Mainloop::Promoted>(p, device, stream);
}

}  // namespace tetra::cuda
