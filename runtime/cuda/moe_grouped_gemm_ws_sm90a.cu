// The warp-specialised Hopper grouped GEMM (runtime/cuda/moe_grouped_gemm.h): one producer warpgroup
// loads, two consumer warpgroups multiply, synchronised per stage by mbarriers instead of a block
// barrier per k-tile. The cooperative kernel (moe_grouped_gemm_sm90a.cu), where every thread loads and
// multiplies, measured latency-bound on the issue's shapes (≈ 40% of the SM's issue and of L2
// throughput, 5–6 cycles per issued instruction): each k-tile waits for everyone's copies.
//
//   block: 384 threads, persistent (one per SM, never more than tiles), tiles blockIdx.x,
//          blockIdx.x + gridDim.x, … of the shared tile list (moe_grouped_wgmma.cuh).
//   tile:  128 × 256 outputs; consumer c owns rows 64c … 64c + 63 (wgmma m64n256k16, 128 fp32
//          accumulators a thread) and writes them from its registers, or under
//          TETRA_GROUPED_EPILOGUE=staged (not the default: slower with one stage fewer; bf16 outputs,
//          whole 64-row slices, not accumulating) into a buffer in shared memory that the copy engine
//          stores as tensor boxes while the consumer goes on to its next tile (store_slice_tma).
//   stages: 4 of 48 KB (A 128 × 64, B 256 × 64 bf16, 128-byte swizzled; 3 beside the staging
//          buffers), one ring over the whole sequence of k-tiles of the block's tiles, so the next
//          tile's loads run under this tile's last k-tiles and its epilogue.
//   producer: one thread; the bulk tensor copy engine (TMA) loads each stage, completion counted in
//          bytes on full[s]. Rows past an expert's end come from the next expert: in the forward and
//          input-gradient GEMMs they only make outputs that are never stored; past the tensor's end
//          and past K the engine fills zeros.
//   consumers: wait full, issue the k-tile's wgmmas, and when the previous k-tile's wgmmas have
//          completed, release its stage (one arrival per warp and consumer on empty: 8 a phase).
//          In the weight-gradient GEMM K runs over an expert's rows: on its last k-tile the consumers
//          zero the next expert's rows in both operands (ordinary stores, a proxy fence and a barrier
//          of the two consumers) before the wgmmas read them.
// Stage s serves k-tiles s, s + 4, …: k-tile i is phase i / 4 of full[s] and empty[s], parity
// (i / 4) mod 2. A parity names a phase only within one of the barrier's current phase; every role
// waits for the k-tiles in order, so none is ever more than one phase early. The producer reuses a
// stage only after both consumers released it (the previous phase of empty[s]).
// Compiled for sm_90a only; elsewhere the kernel is absent and grouped_gemm_wgmma_ws_applies says no.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "runtime/cuda/device_context.h"
#include "runtime/cuda/moe_grouped_wgmma.cuh"

namespace tetra::cuda {

namespace {

using namespace wgmma;

constexpr int kBM = 128, kBN = 256;
constexpr int kThreads = 3 * 128;
constexpr int kAStageBytes = kBM * kBK * 2, kBStageBytes = kBN * kBK * 2;
constexpr int kStageBytes = kAStageBytes + kBStageBytes;
// The ring's stages: 4, or 3 beside the staged epilogue's two buffers (STAGED).
template <bool STAGED>
constexpr int kStagesOf = STAGED ? 3 : 4;
constexpr size_t kSmemBytes = static_cast<size_t>(kStagesOf<false>) * kStageBytes + 1024;  // + alignment
// With the tensor-store epilogue of TC outputs (store_slice_tma); bf16 only (fp32's two 64 KB buffers
// leave room for one stage).
template <class TC>
constexpr size_t kStagedSmemBytes =
    static_cast<size_t>(kStagesOf<true>) * kStageBytes + 1024 + 2 * static_cast<size_t>(tma_slice_bytes<kBN, TC>());

// The tensor maps of one launch (TMA loads): A as [rows, K-or-M] and B as w [G·O, I], each a 2-D
// bf16 tensor with 128-byte swizzling and boxes of 64 inner elements (128 bytes, the swizzle span).
struct Maps {
  CUtensorMap a, b;
  CUtensorMap c;  // the output, for the tensor-store epilogue only (output_map)
};


#ifdef TETRA_WGMMA
// The stage ring in shared memory: 1024-byte aligned stages (the swizzle pattern repeats every 1024
// bytes of address), A then B in each, and the stages' two barriers.
struct Ring {
  uint32_t base;
  uint64_t* full;
  uint64_t* empty;
  __device__ uint32_t a_stage(int s) const { return base + static_cast<uint32_t>(s * kStageBytes); }
  __device__ uint32_t b_stage(int s) const { return base + static_cast<uint32_t>(s * kStageBytes + kAStageBytes); }
};

// A weight-gradient tile of an expert without rows adds nothing to an accumulated gradient: skipped
// (by every role alike, so that the k-tile sequence agrees).
template <GroupedGemmKind KIND>
__device__ __forceinline__ bool skipped(const Params& p, int64_t KT) {
  return KIND == GroupedGemmKind::BackwardWeight && KT == 0 && p.accumulate;
}

// The producer thread's copies of k-tile kt of tile L into stage s, counted on bar. r0: the tile's
// expert's first row of the row tensors; w0: of the stacked weights [G·O, I].
template <GroupedGemmKind KIND>
__device__ __forceinline__ void load_k_tile(const Ring& ring, const Maps& maps, int s, uint32_t bar, const Tile& L,
                                            int64_t r0, int64_t w0, int64_t kt) {
  constexpr bool B_KMAJOR = KIND == GroupedGemmKind::Forward;
  const int k0 = static_cast<int>(kt * kBK);
  if (KIND != GroupedGemmKind::BackwardWeight) {
    tma_load_2d(ring.a_stage(s), &maps.a, k0, static_cast<int>(r0 + L.m0), bar);  // 64 k × 128 rows
  } else {
#pragma unroll
    for (int c = 0; c < kBM / 64; ++c)  // 64 m × 64 k boxes, one per 64-column block
      tma_load_2d(ring.a_stage(s) + c * (kBK / 8) * 1024, &maps.a, static_cast<int>(L.m0 + 64 * c),
                  static_cast<int>(r0 + k0), bar);
  }
  if (B_KMAJOR) {
    tma_load_2d(ring.b_stage(s), &maps.b, k0, static_cast<int>(w0 + L.n0), bar);  // 64 k × 256 n
  } else {
    // 64 n × 64 k boxes: B = w[g] (rows w0 + k) or x (rows r0 + k)
    const int row = static_cast<int>((KIND == GroupedGemmKind::BackwardWeight ? r0 : w0) + k0);
#pragma unroll
    for (int c = 0; c < kBN / 64; ++c)
      tma_load_2d(ring.b_stage(s) + c * (kBK / 8) * 1024, &maps.b, static_cast<int>(L.n0 + 64 * c), row, bar);
  }
}

// The producer (one thread): every k-tile of the block's tiles, each into the next stage once both
// consumers released it.
template <GroupedGemmKind KIND, int kStages>
__device__ __forceinline__ void produce(const Params& p, const Maps& maps, const int* table, int64_t total,
                                        const Ring& ring) {
  int64_t i = 0;  // k-tiles issued
  for (int64_t t = blockIdx.x; t < total; t += gridDim.x) {
    const Tile L = tile_info<KIND, kBM, kBN>(p, table, t);
    const int64_t KT = (L.K + kBK - 1) / kBK;
    if (skipped<KIND>(p, KT)) continue;
    const int64_t r0 = (L.a - p.a) / lda<KIND>(p);
    const int64_t w0 = KIND == GroupedGemmKind::BackwardWeight ? 0 : (L.b - p.b) / p.I;
    for (int64_t kt = 0; kt < KT; ++kt, ++i) {
      const int s = static_cast<int>(i % kStages);
      if (i >= kStages) mbarrier_wait(smem_addr(&ring.empty[s]), static_cast<uint32_t>((i / kStages - 1) & 1));
      const uint32_t bar = smem_addr(&ring.full[s]);
      mbarrier_arrive_expect_tx(bar, kStageBytes);
      load_k_tile<KIND>(ring, maps, s, bar, L, r0, w0, kt);
    }
  }
}

// The weight-gradient GEMM's last k-tile of an expert whose rows end inside it (valid of 64): the copy
// engine brought the next expert's rows (k ≥ valid) as well. Both consumers (ct: 0 … 255) zero them
// in A and B (whole 128-byte rows of the M/N-major atoms, so the swizzle does not matter), fence for
// wgmma's proxy, and sync with each other.
__device__ __forceinline__ void zero_rows_past_expert(const Ring& ring, int s, int valid, int ct) {
  const int chunks_per_block = (kBK - valid) * 8;  // 16-byte chunks of one 64-column block
  const int blocks = kBM / 64 + kBN / 64;
  for (int q = ct; q < blocks * chunks_per_block; q += 256) {
    const int blk = q / chunks_per_block, rest = q % chunks_per_block;
    const int kr = valid + rest / 8, ch = rest % 8;
    const uint32_t tile = blk < kBM / 64 ? ring.a_stage(s) + blk * (kBK / 8) * 1024
                                         : ring.b_stage(s) + (blk - kBM / 64) * (kBK / 8) * 1024;
    const uint32_t addr = tile + (kr >> 3) * 1024 + (kr & 7) * 128 + ch * 16;
    asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(addr), "r"(0) : "memory");
  }
  fence_proxy_async();
  asm volatile("bar.sync 1, 256;\n" ::: "memory");
}

// A consumer warpgroup (consumer 0 or 1: rows 64·consumer … + 63 of each tile): waits for each
// stage, multiplies it into d, releases the stage before it, and stores each finished tile slice.
template <GroupedGemmKind KIND, class TC, bool STAGED>
__device__ __forceinline__ void consume(const Params& p, const CUtensorMap* c_map, const int* table, int64_t total,
                                        const Ring& ring, int consumer) {
  constexpr int kStages = kStagesOf<STAGED>;
  constexpr bool A_KMAJOR = KIND != GroupedGemmKind::BackwardWeight;
  constexpr bool B_KMAJOR = KIND == GroupedGemmKind::Forward;
  const int lane = threadIdx.x % 32;
  const int ct = threadIdx.x - 128;  // 0 … 255 over both consumers
  float d[128];
  int64_t i = 0;  // k-tiles of the block's sequence before the current one
  for (int64_t t = blockIdx.x; t < total; t += gridDim.x) {
    const Tile T = tile_info<KIND, kBM, kBN>(p, table, t);
    const int64_t KT = (T.K + kBK - 1) / kBK;
    if (skipped<KIND>(p, KT)) continue;
#pragma unroll
    for (int r = 0; r < 128; ++r) d[r] = 0.0f;
    for (int64_t kt = 0; kt < KT; ++kt, ++i) {
      const int s = static_cast<int>(i % kStages);
      mbarrier_wait(smem_addr(&ring.full[s]), static_cast<uint32_t>((i / kStages) & 1));
      if (KIND == GroupedGemmKind::BackwardWeight && kt == KT - 1 && T.K % kBK != 0)
        zero_rows_past_expert(ring, s, static_cast<int>(T.K % kBK), ct);
      __syncwarp();  // converged again for the .aligned wgmma instructions
      wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < kBK / 16; ++ks)
        wgmma_m64n256k16<A_KMAJOR ? 0 : 1, B_KMAJOR ? 0 : 1>(d, desc_rows<A_KMAJOR>(ring.a_stage(s), 64 * consumer, ks),
                                                             desc_rows<B_KMAJOR>(ring.b_stage(s), 0, ks));
      wgmma_commit();
      wgmma_wait<1>();  // the previous k-tile's wgmmas are done with their stage
#pragma unroll
      for (int r = 0; r < 128; ++r) fence_operand(d[r]);
      if (kt > 0 && lane == 0) mbarrier_arrive(smem_addr(&ring.empty[(i - 1) % kStages]));
    }
    wgmma_wait<0>();
#pragma unroll
    for (int r = 0; r < 128; ++r) fence_operand(d[r]);
    if (KT > 0 && lane == 0) mbarrier_arrive(smem_addr(&ring.empty[(i - 1) % kStages]));
    // named barriers 2 and 3 (1: zero_rows_past_expert's)
    const uint32_t buffers = ring.base + static_cast<uint32_t>(kStages * kStageBytes);
    store_consumer_slice<KIND, kBN, TC, STAGED>(p, c_map, T, d, buffers, consumer, 2 + consumer);
  }
  if constexpr (STAGED) {
    if (threadIdx.x % 128 == 0) bulk_wait();  // the last slice's stores, before the block ends
  }
}
#endif  // TETRA_WGMMA

template <GroupedGemmKind KIND, class TC, bool STAGED>
__global__ void __launch_bounds__(kThreads, 1) grouped_gemm_ws_kernel(Params p, const __grid_constant__ Maps maps) {
#ifdef TETRA_WGMMA
  constexpr int kStages = kStagesOf<STAGED>;
  extern __shared__ unsigned char smem_raw[];
  __shared__ int table[kMaxTableGroups + 1];
  __shared__ int rows[kMaxLptGroups];
  __shared__ alignas(8) uint64_t full[kStages], empty[kStages];
  const int64_t total = build_tile_table<KIND, kBM>(p, table, rows);
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbarrier_init(smem_addr(&full[s]), 1);
      mbarrier_init(smem_addr(&empty[s]), 8);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");  // visible to the copy engine
  }
  __syncthreads();
  const Ring ring{(smem_addr(smem_raw) + 1023u) & ~1023u, full, empty};

  const int role = threadIdx.x / 128;  // 0: producer; 1, 2: consumers
  if (role == 0) {
    // registers to the consumers (128 accumulators each and the epilogue's addresses): 128·56 + 256·224
    // of the multiprocessor's 65536
    asm volatile("setmaxnreg.dec.sync.aligned.u32 56;\n" ::: "memory");
    if (threadIdx.x != 0) return;
    produce<KIND, kStages>(p, maps, table, total, ring);
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 224;\n" ::: "memory");
    consume<KIND, TC, STAGED>(p, &maps.c, table, total, ring, role - 1);
  }
#endif  // TETRA_WGMMA
}

// A 2-D bf16 tensor [outer, inner] with boxes of 64 (128 bytes) × box_outer.
CUtensorMap tensor_map(const char* op, const void* base, int64_t inner, int64_t outer, int box_outer) {
  return wgmma::tensor_map(op, "wgmma ws kernel", base, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, inner, outer, box_outer);
}

template <GroupedGemmKind KIND, class TC, bool STAGED>
void launch_epilogue(const Params& prm, const Maps& maps, int64_t blocks, cudaStream_t stream) {
  auto kernel = grouped_gemm_ws_kernel<KIND, TC, STAGED>;
  constexpr size_t smem = STAGED ? kStagedSmemBytes<TC> : kSmemBytes;
  allow_dynamic_smem(kernel, smem);
  kernel<<<static_cast<unsigned>(blocks), kThreads, smem, stream>>>(prm, maps);
  TETRA_CUDA_CHECK_LAUNCH();
}

template <GroupedGemmKind KIND, class TC>
void launch(const GroupedGemm& p, const Params& prm, const Maps& maps, int64_t blocks, cudaStream_t stream) {
  if constexpr (std::is_same_v<TC, bf16>) {
    if (grouped_gemm_ws_staged_epilogue() && wgmma::device_fits(kStagedSmemBytes<TC>, nullptr)) {
      Maps with_output = maps;
      with_output.c = output_map<TC>(p, "wgmma ws kernel's output");
      return launch_epilogue<KIND, TC, true>(prm, with_output, blocks, stream);
    }
  }
  launch_epilogue<KIND, TC, false>(prm, maps, blocks, stream);
}

}  // namespace

bool grouped_gemm_wgmma_ws_applies(const GroupedGemm& p, const char** why) {
  if (!wgmma::shape_applies(p, why)) return false;
  // TMA coordinates are 32-bit: rows of the row tensors and of the stacked weights
  if (p.R >= (int64_t{1} << 31) || p.G * p.O >= (int64_t{1} << 31)) {
    if (why) *why = "a tensor has 2^31 rows or more";
    return false;
  }
  static const bool fits = wgmma::device_fits(kSmemBytes, nullptr);
  if (!fits) {
    wgmma::device_fits(kSmemBytes, why);
    return false;
  }
  if (encode_tiled() == nullptr) {
    if (why) *why = "the driver has no cuTensorMapEncodeTiled";
    return false;
  }
  return true;
}

void grouped_gemm_wgmma_ws(const GroupedGemm& p, Device device, cudaStream_t stream) {
  const char* why = nullptr;
  if (!grouped_gemm_wgmma_ws_applies(p, &why))
    TETRA_FAIL(Internal, p.op, " (wgmma ws kernel): not applicable: ", why);
  if (p.R == 0) {  // no rows (a tensor map cannot have a zero extent): the weight gradient is zero or unchanged
    if (p.kind == GroupedGemmKind::BackwardWeight && !p.accumulate)
      TETRA_CUDA_CHECK(cudaMemsetAsync(p.c, 0, static_cast<size_t>(p.G * p.O * p.I) * dtype_size(p.c_type), stream));
    return;
  }
  const int64_t N = p.kind == GroupedGemmKind::Forward ? p.O : p.I;
  Params prm{static_cast<const bf16*>(p.a), static_cast<const bf16*>(p.b), p.c, p.offsets, static_cast<int>(p.G), p.R,
             p.O, p.I, static_cast<int>((p.O + kBM - 1) / kBM), static_cast<int>((N + kBN - 1) / kBN), p.accumulate};
  Maps maps{};
  if (p.kind == GroupedGemmKind::Forward) {  // A = x [R, I], B = w [G·O, I] K-major, boxes of 256 rows
    maps.a = tensor_map(p.op, p.a, p.I, p.R, kBM);
    maps.b = tensor_map(p.op, p.b, p.I, p.G * p.O, kBN);
  } else if (p.kind == GroupedGemmKind::BackwardInput) {  // A = dy [R, O]; B = w [G·O, I] N-major, 64 × 64 boxes
    maps.a = tensor_map(p.op, p.a, p.O, p.R, kBM);
    maps.b = tensor_map(p.op, p.b, p.I, p.G * p.O, kBK);
  } else {  // A = dy [R, O] M-major, B = x [R, I] N-major: 64 × 64 boxes
    maps.a = tensor_map(p.op, p.a, p.O, p.R, kBK);
    maps.b = tensor_map(p.op, p.b, p.I, p.R, kBK);
  }
  // Persistent blocks, one per SM (193 KB of shared memory), never more than tiles.
  const int64_t blocks = std::min<int64_t>(tile_bound(p, prm.tiles_m, prm.tiles_n, kBM), sm_count(device));
  if (blocks == 0) return;
  auto by_output = [&](auto tc) {
    using TC = decltype(tc);
    switch (p.kind) {
      case GroupedGemmKind::Forward: return launch<GroupedGemmKind::Forward, TC>(p, prm, maps, blocks, stream);
      case GroupedGemmKind::BackwardInput:
        return launch<GroupedGemmKind::BackwardInput, TC>(p, prm, maps, blocks, stream);
      case GroupedGemmKind::BackwardWeight:
        return launch<GroupedGemmKind::BackwardWeight, TC>(p, prm, maps, blocks, stream);
    }
  };
  if (p.c_type == DType::BF16) by_output(bf16{});
  else by_output(float{});
}

}  // namespace tetra::cuda
