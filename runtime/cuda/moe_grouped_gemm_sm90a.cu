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
// Layouts, loads and the tile list: runtime/cuda/moe_grouped_wgmma.cuh.
// cp.async writes shared memory through the generic proxy and wgmma reads it through the async proxy:
// each thread fences (fence.proxy.async) after its copies land and before the block barrier.
// Compiled for sm_90a only (wgmma); elsewhere the kernel is absent and grouped_gemm_wgmma_applies says no.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <string>

#include "runtime/cuda/device_context.h"
#include "runtime/cuda/moe_grouped_wgmma.cuh"

namespace tetra::cuda {

namespace {

using namespace wgmma;

constexpr int kBM = 128, kBN = 256, kStages = 4, kAhead = 2;  // k-tiles loaded ahead
constexpr int kThreads = 256;                                   // 2 warpgroups
constexpr int kAStageBytes = kBM * kBK * 2, kBStageBytes = kBN * kBK * 2;
constexpr int kStageBytes = kAStageBytes + kBStageBytes;
constexpr size_t kSmemBytes = static_cast<size_t>(kStages) * kStageBytes + 1024;  // + alignment
static_assert(kStages - kAhead >= 2, "a stage is overwritten two k-tiles after its wgmma was issued");


// Persistent: each block takes tiles blockIdx.x, blockIdx.x + gridDim.x, … and runs one pipeline over
// the sequence of all their k-tiles, so that the next tile's first k-tiles load while the current
// tile finishes and writes its result (straight from the accumulators: the pipeline's shared memory
// stays busy). Stage of the i-th k-tile in the sequence: i mod 4; loaded at step i − 2.
template <GroupedGemmKind KIND, class TC>
__global__ void __launch_bounds__(kThreads, 1) grouped_gemm_wgmma_kernel(Params p) {
#ifdef TETRA_WGMMA
  constexpr bool A_KMAJOR = KIND != GroupedGemmKind::BackwardWeight;
  constexpr bool B_KMAJOR = KIND == GroupedGemmKind::Forward;
  const int64_t ld_a = lda<KIND>(p), ld_b = ldb(p);
  extern __shared__ unsigned char smem_raw[];
  __shared__ int table[kMaxTableGroups + 1];
  __shared__ int rows[kMaxLptGroups];
  const int64_t total = build_tile_table<KIND, kBM>(p, table, rows);

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
        L = tile_info<KIND, kBM, kBN>(p, table, t_load);
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
      load_tile<A_KMAJOR, kBM, kThreads>(a_stage(stage_load), threadIdx.x, L.a, ld_a, L.m0, L.M, k0, L.K);
      load_tile<B_KMAJOR, kBN, kThreads>(b_stage(stage_load), threadIdx.x, L.b, ld_b, L.n0, L.N, k0, L.K);
      ++kt_load;
      seek();
    }
    cp_async_commit();
    stage_load = (stage_load + 1) % kStages;
  };
#pragma unroll
  for (int s = 0; s < kAhead; ++s) issue();

  const int wg = threadIdx.x / 128;
  int stage = 0;
  float d[128];
  for (int64_t t = blockIdx.x; t < total; t += gridDim.x) {
    const Tile T = tile_info<KIND, kBM, kBN>(p, table, t);
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
        wgmma_m64n256k16<A_KMAJOR ? 0 : 1, B_KMAJOR ? 0 : 1>(d, desc_rows<A_KMAJOR>(a_stage(stage), wg * 64, ks),
                                                             desc_rows<B_KMAJOR>(b_stage(stage), 0, ks));
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
    store_slice<kBN>(d, static_cast<TC*>(p.c) + T.c_offset, ldc<KIND>(p), T.m0 + wg * 64, T.n0, T.M, T.N,
                     KIND == GroupedGemmKind::BackwardWeight && p.accumulate);
  }
  cp_async_wait<0>();
#endif  // TETRA_WGMMA
}

template <GroupedGemmKind KIND, class TC>
void launch(const Params& prm, int64_t blocks, cudaStream_t stream) {
  auto kernel = grouped_gemm_wgmma_kernel<KIND, TC>;
  allow_dynamic_smem(kernel, kSmemBytes);
  kernel<<<static_cast<unsigned>(blocks), kThreads, kSmemBytes, stream>>>(prm);
  TETRA_CUDA_CHECK_LAUNCH();
}

}  // namespace

GroupedEpilogue grouped_gemm_epilogue() {
  const char* v = std::getenv("TETRA_GROUPED_EPILOGUE");
  const std::string s = v ? v : "";
  if (s.empty() || s == "auto") return GroupedEpilogue::Auto;
  if (s == "direct") return GroupedEpilogue::Direct;
  if (s == "staged") return GroupedEpilogue::Staged;
  TETRA_FAIL(Config, "TETRA_GROUPED_EPILOGUE=", s, ": want auto, direct or staged");
}

bool grouped_gemm_fp8_staged_epilogue() { return grouped_gemm_epilogue() != GroupedEpilogue::Direct; }
bool grouped_gemm_ws_staged_epilogue() { return grouped_gemm_epilogue() == GroupedEpilogue::Staged; }

bool wgmma::device_fits(size_t smem_bytes, const char** why) {
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
  // the static tile table (kMaxTableGroups + 1 + kMaxLptGroups ints) and the mbarriers on top
  const size_t static_bytes = (kMaxTableGroups + 1 + kMaxLptGroups) * sizeof(int) + 256;
  if (static_cast<size_t>(optin) < smem_bytes + static_bytes) {
    if (why) *why = "the device has too little shared memory per block";
    return false;
  }
  return true;
}

bool wgmma::shape_applies(const GroupedGemm& p, const char** why) {
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
  return true;
}

bool grouped_gemm_wgmma_applies(const GroupedGemm& p, const char** why) {
  if (!wgmma::shape_applies(p, why)) return false;
  static const bool fits = wgmma::device_fits(kSmemBytes, nullptr);
  if (!fits) {
    wgmma::device_fits(kSmemBytes, why);
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
