// Grouped expert GEMMs on CUDA (runtime/ops.h, moe_grouped_linear_*): the problem as the kernels see
// it, and the implementations to choose from. Expert g owns rows [offsets[g], offsets[g + 1]) of the
// row tensors (offsets int32 [G + 1] on the device, read by the kernels: no host synchronisation)
// and the weight w[g] = w + g·O·I, [O, I] row-major (nn.Linear). In the kernels' terms,
// C[M, N] = Σ_k A(m, k)·B(k, n):
//   Forward         M = rows of g, N = O, K = I    A = x rows (K-major)   B = w[g] as [N, K] (K-major)   C = y rows
//   BackwardInput   M = rows of g, N = I, K = O    A = dy rows (K-major)  B = w[g] as [K, N] (N-major)   C = dx rows
//   BackwardWeight  M = O, N = I, K = rows of g    A = dy rows as [K, M]  B = x rows as [K, N]           C = dw[g]
// (M-major)      (N-major)
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "runtime/device.h"
#include "runtime/dtype.h"

namespace tetra::cuda {

enum class GroupedGemmKind { Forward, BackwardInput, BackwardWeight };

struct GroupedGemm {
  GroupedGemmKind kind = GroupedGemmKind::Forward;
  int64_t G = 0;  // experts
  int64_t R = 0;  // rows of the row tensors
  int64_t O = 0, I = 0;
  const int32_t* offsets = nullptr;  // device, [G + 1]
  // Forward: a = x [R, I], b = w [G, O, I], c = y [R, O]
  // BackwardInput: a = dy [R, O], b = w [G, O, I], c = dx [R, I]
  // BackwardWeight: a = dy [R, O], b = x [R, I], c = dw [G, O, I]
  const void* a = nullptr;
  const void* b = nullptr;
  void* c = nullptr;
  DType ab_type = DType::BF16;  // a and b: fp32 or bf16, alike; FP8 operands: a's format
  DType c_type = DType::BF16;   // fp32 or bf16
  bool accumulate = false;      // BackwardWeight only: c += result
  // FP8 operands (moe_grouped_fp8_*, grouped_gemm_fp8 only): a and b hold codes, a's format in
  // ab_type and b's in b_fp8 (F8E4M3 or F8E5M2), and expert g's result is multiplied by
  // a_scale[g]·b_scale[g], the dequantisation scales of its two casts (fp32 [G], on the device).
  DType b_fp8 = DType::F8E4M3;
  const float* a_scale = nullptr;
  const float* b_scale = nullptr;
  // FP8 operands in the tensor-core kernel's layouts (grouped_gemm_fp8_tensor_cores; all K-major):
  //   Forward         a = x codes [R, I]              b = w codes [G, O, I]
  //   BackwardInput   a = dy codes [R, O]             b = w[g]ᵀ codes [G, I, O] (blockwise: [I, G·O])
  //   BackwardWeight  a = dyᵀ codes [O, Rp]           b = xᵀ codes [I, Rp]
  // where in BackwardWeight expert g's rows are the columns [po[g], po[g + 1]) of both, its row count
  // rounded up to a multiple of 128 with zero codes (padded_offsets = po, int32 [G + 1] on the
  // device; Rp ≥ po[G], the tensors' row stride). False: every operand as in the table above.
  bool fp8_transposed = false;
  const int32_t* padded_offsets = nullptr;
  int64_t Rp = 0;
  // Blockwise FP8 (DeepSeek-V3's scales; the tensor-core kernel's layouts only, O and I multiples of
  // 128): every 128 products of K are summed, multiplied by their two scales and added in fp32.
  //   Forward, BackwardInput: a_scale = the row operand's 1×128 scales [K/128, a_scale_ld] (rows
  //     inner: entry kb·ld + r). Forward: b = w codes [G·O, I], b_scale its 128×128 block scales
  //     [G·O/128, b_scale_ld] (expert g's n-block nb, k-block kb: (g·O/128 + nb)·ld + kb).
  //     BackwardInput: b = the whole stack's transposed codes [I, G·O] (expert g's wᵀ at columns
  //     g·O), b_scale [I/128, b_scale_ld] (entry nb·ld + g·O/128 + kb): one cast for every expert.
  //   BackwardWeight: both the transposed operands' 128×1 scales over the padded rows, [Rp/128, ld]
  //     (entry kb·ld + o for dyᵀ, kb·ld + i for xᵀ; kb counts 128-row blocks from padded row 0).
  bool blockwise = false;
  int64_t a_scale_ld = 0, b_scale_ld = 0;
  const char* op = "grouped GEMM";  // named in errors
};

// Auto: the first that applies of WgmmaWs and Wgmma (Hopper's warpgroup MMA; bf16 operands, O and I
// multiples of 8, 16-byte aligned tensors, a compute capability 9.0 device and a build for sm_90a),
// Mma (mma.sync tensor cores, same conditions on any device from sm_80) and Simt (fp32 FMAs on CUDA cores, any
// shape and type: the fp32 path, exact to fp32 rounding). Cublas: cublasGemmGroupedBatchedEx, which
// takes the group sizes on the host: it copies the offsets to the host and waits for them (a host
// synchronisation per call; refused during graph capture); operands and output of one type.
enum class GroupedGemmImpl { Auto, Wgmma, WgmmaWs, Mma, Simt, Cublas };

// The implementation Auto resolves to. Starts from the environment variable TETRA_MOE_GEMM
// (unset or "auto", "wgmma", "wgmma_ws", "mma", "simt", "cublas"; anything else fails at the first call);
// set_grouped_gemm_impl overrides it for the process (benchmarks compare them).
GroupedGemmImpl grouped_gemm_impl();
void set_grouped_gemm_impl(GroupedGemmImpl impl);
const char* grouped_gemm_impl_name(GroupedGemmImpl impl);

// Runs the problem on `stream` (of `device`, which must be current) with `impl` (Auto: as above).
void grouped_gemm(const GroupedGemm& p, Device device, cudaStream_t stream, GroupedGemmImpl impl = GroupedGemmImpl::Auto);

// Per implementation (runtime/cuda/moe_grouped_gemm_*.cu, *_cuda.cpp). The *_applies functions say
// whether that kernel can take p (and why not, in *why).
bool grouped_gemm_wgmma_applies(const GroupedGemm& p, const char** why);
void grouped_gemm_wgmma(const GroupedGemm& p, Device device, cudaStream_t stream);
// WgmmaWs: the same conditions as Wgmma (and the driver's tensor-map encoder); warp-specialised: a
// loading warpgroup (the bulk tensor copy engine, cp.async for weight gradients) and two multiplying
// warpgroups, synchronised per pipeline stage by mbarriers.
// TETRA_GROUPED_EPILOGUE, read at every launch (the tests compare the ways in one process): how the
// Hopper grouped kernels (the bf16 `wgmma_ws` and the FP8 one) store a tile's outputs: "direct" (each
// thread's own stores), "staged" (each whole 64-row slice through shared memory, stored by the copy
// engine as tensor boxes while the consumers go on to the next tile: wgmma::store_slice_tma; where
// its buffers fit, and not where the outputs are added to: an accumulating weight gradient reads the
// previous values first), or "auto" (the default): each kernel the way measured faster on Hopper,
// staged for the FP8 kernel, direct for `wgmma_ws` (whose buffers cost it a stage; docs/kernels.md,
// FP8 training v19).
enum class GroupedEpilogue { Auto, Direct, Staged };
GroupedEpilogue grouped_gemm_epilogue();
bool grouped_gemm_fp8_staged_epilogue();  // auto or staged
bool grouped_gemm_ws_staged_epilogue();   // staged
bool grouped_gemm_wgmma_ws_applies(const GroupedGemm& p, const char** why);
void grouped_gemm_wgmma_ws(const GroupedGemm& p, Device device, cudaStream_t stream);
bool grouped_gemm_mma_applies(const GroupedGemm& p, const char** why);
void grouped_gemm_mma(const GroupedGemm& p, Device device, cudaStream_t stream);
void grouped_gemm_simt(const GroupedGemm& p, Device device, cudaStream_t stream);
// The FP8 problem (a_scale and b_scale given): with p.fp8_transposed the warp-specialised wgmma FP8
// kernel (grouped_gemm_fp8_wgmma), else the SIMT kernel reading the codes (fp32 FMAs of the code
// values, any shape). Neither synchronises the host.
void grouped_gemm_fp8(const GroupedGemm& p, Device device, cudaStream_t stream);
// Whether the FP8 problem p (its a and b not cast yet) runs on tensor cores, so that its operands
// must be cast in the transposed layouts: TETRA_MOE_GEMM is not "simt" and the wgmma FP8 kernel
// applies (an sm_90a build and a compute capability 9.0 device; E4M3 × E4M3 or E5M2 × E4M3 codes;
// O and I multiples of 16; at most kMaxTableGroups experts; fewer than 2^31 rows in every operand).
bool grouped_gemm_fp8_tensor_cores(const GroupedGemm& p);
// Rp for R rows in G experts: round_up(R, 128) + 128·G, a bound on Σ_g round_up(rows of g, 128).
int64_t grouped_gemm_fp8_padded_rows(int64_t R, int64_t G);
bool grouped_gemm_fp8_wgmma_applies(const GroupedGemm& p, const char** why);
// Whether the wgmma FP8 kernel accumulates `kind` in the tensor cores over the whole K (128 × 256
// tiles, Hopper's fast accumulation) rather than promoting every 128 products into fp32 (128 × 128
// tiles): TETRA_FP8_GROUPED_ACCUM = forward (the default), all or none.
bool grouped_gemm_fp8_fast_accumulation(GroupedGemmKind kind);
void grouped_gemm_fp8_wgmma(const GroupedGemm& p, Device device, cudaStream_t stream);
void grouped_gemm_cublas(const GroupedGemm& p, Device device, cudaStream_t stream);

}  // namespace tetra::cuda
