// The warp-specialised Hopper grouped GEMM (runtime/cuda/moe_grouped_gemm.h), "ping-pong": one
// producer warpgroup loads, two consumer warpgroups multiply, each on output tiles of its own, so
// that one's epilogue (the result from registers to global memory, read-modify-write when
// accumulating) runs while the other keeps the tensor cores busy. In the cooperative kernel
// (moe_grouped_gemm_sm90a.cu) both warpgroups share a tile and the tensor cores wait through every
// epilogue: at K = 512 (the down projection) that is a fifth of the time.
//
//   block: 384 threads, persistent (one per SM, never more than tiles); tiles blockIdx.x,
//          blockIdx.x + gridDim.x, … in the order of the shared tile list; the p-th of them goes to
//          consumer p mod 2.
//   tile:  128 × 128 outputs, two wgmma m64n128k16 per k16 step (128 fp32 accumulators a thread).
//   stages: 6 of 32 KB (A 128 × 64 and B 128 × 64 bf16, 128-byte swizzled), one ring for the whole
//          sequence of k-tiles of the block's tiles, filled in sequence order.
//   producer: cp.async with zero-fill at an expert's edge (nothing of the next expert reaches a
//          weight gradient), kLag k-tiles in flight per thread; when its copies of k-tile i have
//          landed, each producer thread fences (generic → async proxy, for wgmma) and arrives on
//          full[i mod 6] (128 arrivals a phase).
//   consumers: wait full, issue the k-tile's wgmmas, and when the previous k-tile's wgmmas have
//          completed, release its stage (one arrival per warp on empty: 4 a phase).
// Stage s serves k-tiles s, s + 6, …: k-tile i is phase i / 6 of full[s] and empty[s], parity
// (i / 6) mod 2. The producer reuses a stage only after the consumer released it (the previous
// phase of empty[s]); no deadlock since kLag ≤ kStages − 2 (the producer, kLag ahead of what it has
// published, waits on a stage released two k-tiles before the consumer's current one at the latest).
// A parity names a phase only within one phase of the barrier's current one: a consumer that waited
// for k-tile i while k-tile i − 12 was not yet published would take an earlier phase of the same
// parity for its own. So the consumers take turns (turn[c]: the other consumer has waited for every
// k-tile of its previous tile, hence everything before this tile's first k-tile is published): the
// mainloops run in tile order, one after the other, and each epilogue overlaps the other's mainloop.
// Compiled for sm_90a only; elsewhere the kernel is absent and grouped_gemm_wgmma_pingpong_applies says no.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "runtime/cuda/device_context.h"
#include "runtime/cuda/moe_grouped_wgmma.cuh"

namespace tetra::cuda {

namespace {

using namespace wgmma;

constexpr int kBM = 128, kBN = 128, kStages = 6, kLag = 2;
constexpr int kProducerThreads = 128, kThreads = 3 * 128;
constexpr int kAStageBytes = kBM * kBK * 2, kBStageBytes = kBN * kBK * 2;
constexpr int kStageBytes = kAStageBytes + kBStageBytes;
constexpr size_t kSmemBytes = static_cast<size_t>(kStages) * kStageBytes + 1024;  // + alignment
static_assert(kLag <= kStages - 2, "the producer must not wait on a stage the consumer still needs to publish");

#ifdef TETRA_WGMMA

// d[0..63] += A(64×16) · B(16×128) for this warpgroup; TA / TB: the operand is M/N-major.
template <int TA, int TB>
__device__ __forceinline__ void wgmma_m64n128k16(float (&d)[64], uint64_t desc_a, uint64_t desc_b) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %68, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63},"
      " %64, %65, p, 1, 1, %66, %67;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(desc_a), "l"(desc_b), "n"(TA), "n"(TB), "r"(1));
}

#endif  // TETRA_WGMMA

template <GroupedGemmKind KIND, class TC>
__global__ void __launch_bounds__(kThreads, 1) grouped_gemm_pingpong_kernel(Params p) {
#ifdef TETRA_WGMMA
  constexpr bool A_KMAJOR = KIND != GroupedGemmKind::BackwardWeight;
  constexpr bool B_KMAJOR = KIND == GroupedGemmKind::Forward;
  extern __shared__ unsigned char smem_raw[];
  __shared__ int table[kMaxTableGroups + 1];
  __shared__ int rows[kMaxLptGroups];
  __shared__ alignas(8) uint64_t full[kStages], empty[kStages], turn[2];
  const int64_t total = build_tile_table<KIND, kBM>(p, table, rows);
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbarrier_init(smem_addr(&full[s]), kProducerThreads);
      mbarrier_init(smem_addr(&empty[s]), 4);
    }
    mbarrier_init(smem_addr(&turn[0]), 4);
    mbarrier_init(smem_addr(&turn[1]), 4);
  }
  __syncthreads();

  // 1024-byte aligned stages (the swizzle pattern repeats every 1024 bytes of address)
  const uint32_t base = (smem_addr(smem_raw) + 1023u) & ~1023u;
  auto a_stage = [&](int s) { return base + static_cast<uint32_t>(s * kStageBytes); };
  auto b_stage = [&](int s) { return base + static_cast<uint32_t>(s * kStageBytes + kAStageBytes); };
  // A weight-gradient tile of an expert without rows adds nothing to an accumulated gradient: skipped
  // (by every role alike, so the tile parity and the k-tile sequence agree).
  auto skipped = [&](int64_t KT) { return KIND == GroupedGemmKind::BackwardWeight && KT == 0 && p.accumulate; };

  const int role = threadIdx.x / 128;  // 0: producer; 1, 2: consumers
  if (role == 0) {
    const int t_in = threadIdx.x;
    const int64_t ld_a = lda<KIND>(p), ld_b = ldb(p);
    int64_t i = 0;  // k-tiles issued
    for (int64_t t = blockIdx.x; t < total; t += gridDim.x) {
      const Tile L = tile_info<KIND, kBM, kBN>(p, table, t);
      const int64_t KT = (L.K + kBK - 1) / kBK;
      if (skipped(KT)) continue;
      for (int64_t kt = 0; kt < KT; ++kt, ++i) {
        const int s = static_cast<int>(i % kStages);
        if (i >= kStages) mbarrier_wait(smem_addr(&empty[s]), static_cast<uint32_t>((i / kStages - 1) & 1));
        const int64_t k0 = kt * kBK;
        load_tile<A_KMAJOR, kBM, kProducerThreads>(a_stage(s), t_in, L.a, ld_a, L.m0, L.M, k0, L.K);
        load_tile<B_KMAJOR, kBN, kProducerThreads>(b_stage(s), t_in, L.b, ld_b, L.n0, L.N, k0, L.K);
        cp_async_commit();
        if (i >= kLag) {  // k-tile i − kLag has landed: publish it
          cp_async_wait<kLag>();
          fence_proxy_async();
          mbarrier_arrive(smem_addr(&full[(i - kLag) % kStages]));
        }
      }
    }
    cp_async_wait<0>();
    fence_proxy_async();
    for (int64_t j = std::max<int64_t>(0, i - kLag); j < i; ++j) mbarrier_arrive(smem_addr(&full[j % kStages]));
  } else {
    const int consumer = role - 1;
    const int lane = threadIdx.x % 32;
    float d0[64], d1[64];  // rows 0–63 and 64–127 of the tile
    int64_t i = 0;         // k-tiles of the block's sequence before the current tile
    int64_t position = 0;  // of the current tile among the block's (skipped ones not counted)
    int64_t mine_done = 0; // tiles this consumer has taken
    for (int64_t t = blockIdx.x; t < total; t += gridDim.x) {
      const Tile T = tile_info<KIND, kBM, kBN>(p, table, t);
      const int64_t KT = (T.K + kBK - 1) / kBK;
      if (skipped(KT)) continue;
      if ((position++ & 1) != consumer) {
        i += KT;
        continue;
      }
      // Consumer 0's n-th tile follows consumer 1's (n − 1)-th, consumer 1's n-th follows consumer 0's
      // n-th: phase n − 1 + consumer of turn[consumer].
      const int64_t turn_phase = mine_done - 1 + consumer;
      if (turn_phase >= 0) {
        mbarrier_wait(smem_addr(&turn[consumer]), static_cast<uint32_t>(turn_phase & 1));
        __syncwarp();
      }
      ++mine_done;
#pragma unroll
      for (int r = 0; r < 64; ++r) d0[r] = 0.0f, d1[r] = 0.0f;
      for (int64_t kt = 0; kt < KT; ++kt, ++i) {
        const int s = static_cast<int>(i % kStages);
        mbarrier_wait(smem_addr(&full[s]), static_cast<uint32_t>((i / kStages) & 1));
        __syncwarp();  // converged again for the .aligned wgmma instructions
        wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < kBK / 16; ++ks) {
          const uint64_t db = desc_rows<B_KMAJOR>(b_stage(s), 0, ks);
          wgmma_m64n128k16<A_KMAJOR ? 0 : 1, B_KMAJOR ? 0 : 1>(d0, desc_rows<A_KMAJOR>(a_stage(s), 0, ks), db);
          wgmma_m64n128k16<A_KMAJOR ? 0 : 1, B_KMAJOR ? 0 : 1>(d1, desc_rows<A_KMAJOR>(a_stage(s), 64, ks), db);
        }
        wgmma_commit();
        wgmma_wait<1>();  // the previous k-tile's wgmmas are done with their stage
#pragma unroll
        for (int r = 0; r < 64; ++r) fence_operand(d0[r]), fence_operand(d1[r]);
        if (kt > 0 && lane == 0) mbarrier_arrive(smem_addr(&empty[(i - 1) % kStages]));
      }
      if (lane == 0) mbarrier_arrive(smem_addr(&turn[1 - consumer]));  // every k-tile of this tile is in
      wgmma_wait<0>();
#pragma unroll
      for (int r = 0; r < 64; ++r) fence_operand(d0[r]), fence_operand(d1[r]);
      if (KT > 0 && lane == 0) mbarrier_arrive(smem_addr(&empty[(i - 1) % kStages]));
      TC* C = static_cast<TC*>(p.c) + T.c_offset;
      const bool acc = KIND == GroupedGemmKind::BackwardWeight && p.accumulate;
      store_slice<kBN>(d0, C, ldc<KIND>(p), T.m0, T.n0, T.M, T.N, acc);
      store_slice<kBN>(d1, C, ldc<KIND>(p), T.m0 + 64, T.n0, T.M, T.N, acc);
    }
  }
#endif  // TETRA_WGMMA
}

template <GroupedGemmKind KIND, class TC>
void launch(const Params& prm, int64_t blocks, cudaStream_t stream) {
  auto kernel = grouped_gemm_pingpong_kernel<KIND, TC>;
  allow_dynamic_smem(kernel, kSmemBytes);
  kernel<<<static_cast<unsigned>(blocks), kThreads, kSmemBytes, stream>>>(prm);
  TETRA_CUDA_CHECK_LAUNCH();
}

}  // namespace

bool grouped_gemm_wgmma_pingpong_applies(const GroupedGemm& p, const char** why) {
  if (!wgmma::shape_applies(p, why)) return false;
  static const bool fits = wgmma::device_fits(kSmemBytes, nullptr);
  if (!fits) {
    wgmma::device_fits(kSmemBytes, why);
    return false;
  }
  return true;
}

void grouped_gemm_wgmma_pingpong(const GroupedGemm& p, Device device, cudaStream_t stream) {
  const char* why = nullptr;
  if (!grouped_gemm_wgmma_pingpong_applies(p, &why))
    TETRA_FAIL(Internal, p.op, " (wgmma ping-pong kernel): not applicable: ", why);
  const int64_t N = p.kind == GroupedGemmKind::Forward ? p.O : p.I;
  Params prm{static_cast<const bf16*>(p.a), static_cast<const bf16*>(p.b), p.c, p.offsets, static_cast<int>(p.G), p.R,
             p.O, p.I, static_cast<int>((p.O + kBM - 1) / kBM), static_cast<int>((N + kBN - 1) / kBN), p.accumulate};
  // Persistent blocks, one per SM (197 KB of shared memory), never more than tiles.
  const int64_t blocks = std::min<int64_t>(tile_bound(p, prm.tiles_m, prm.tiles_n, kBM), sm_count(device));
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
