// One grouped FP8 expert GEMM of runtime/cuda/moe_grouped_fp8.cu in its two parts: the per-expert
// casts of both operands into the layouts of the kernel that multiplies them, and the grouped GEMM
// on the codes. The ops (runtime/ops.h moe_grouped_fp8_*) run both; tetra_moe_bench times them
// apart (how much of a call the casts take, and the kernel's own rate).
#pragma once
#include <cuda_runtime.h>

#include "runtime/cuda/moe_grouped_fp8_cast.h"
#include "runtime/cuda/moe_grouped_gemm.h"
#include "runtime/ops.h"
#include "runtime/tensor.h"

namespace tetra::cuda {

// A call with its operands cast: p reads qa, qb and po (keep this alive until the GEMM has run).
struct GroupedFp8Call {
  GroupedGemm p;
  ExpertCodes qa, qb;
  Tensor po;  // padded offsets of a tensor-core weight gradient, else undefined
};

// c (+)= a ∘ b in `kind`'s layout (GroupedGemm's table; c, a, b as moe_grouped_fp8_* check them):
// casts a and b per expert on the current stream of c's device and returns the call that multiplies
// them (grouped_gemm_fp8(call.p, ...)).
// a_codes, b_codes (may be null): the operands cast ahead (ops::Fp8GroupedCodes), read where they
// hold the layout the kernel takes.
GroupedFp8Call cast_grouped_fp8(const char* op, GroupedGemmKind kind, Tensor& c, const Tensor& a,
                                ops::Fp8Cast a_cast, const Tensor& b, ops::Fp8Cast b_cast, const Tensor& offsets,
                                bool accumulate = false, const ops::Fp8GroupedCodes* a_codes = nullptr,
                                const ops::Fp8GroupedCodes* b_codes = nullptr);

// Blockwise casts (a_cast Rows1x128; b_cast Blocks128, or Rows1x128 for BackwardWeight) into the
// tensor-core kernel's blockwise layouts (runtime/cuda/moe_grouped_fp8_blockwise.cu): fills call.qa,
// call.qb, call.po and p's operand, scale and layout fields (p's kind, extents, offsets and output set).
// Fails (Config) where that kernel does not apply: blockwise expert GEMMs have no other CUDA kernel.
// a_codes, b_codes (may be null): operands cast ahead (ops::Fp8GroupedCodes), read in place of a cast
// here: the forward's or input gradient's weights as a stack's blocks (Blocks128), row operands as
// their 1×128 rows or 128×1 runs (Rows1x128), in the layout this GEMM reads.
void cast_grouped_fp8_blockwise(GroupedFp8Call& call, const Tensor& a, ops::Fp8Cast a_cast, const Tensor& b,
                                ops::Fp8Cast b_cast, const ops::Fp8GroupedCodes* a_codes,
                                const ops::Fp8GroupedCodes* b_codes, Device dev, cudaStream_t stream);

// ops::moe_grouped_fp8_cast of a blockwise row tensor x [R, C] (Rows1x128, C a multiple of 128; ops.h
// Fp8GroupedCodes): the rows' 1×128 codes and the 128×1 runs down each expert's rows, from one read
// of bf16 x (the runs' kernel writing the rows' codes from its stage; fp32 x: the two casts).
void cast_blockwise_row_codes(ops::Fp8GroupedCodes& out, const Tensor& x, ops::Fp8Cast cast, const Tensor& offsets);

// A row tensor x [R, C] (bf16 or fp32) cast transposed in 128×1 runs down each expert's rows: codes
// [C, Rp] (format), expert g's rows at columns [po[g], po[g] + m_g) and zero codes to po[g + 1]; scales
// [Rp/128, padded C] (the run at padded rows 128·b is row b). Expert g's part is what fp8_quantize of
// its rows [m_g, C] in Rows1x128 writes as q_t and scale_t. offsets and padded_offsets: int32 [G + 1]
// on the device.
ExpertCodes cast_expert_runs_transposed(const Tensor& x, DType format, const int32_t* offsets,
                                        const int32_t* padded_offsets, int G, int64_t Rp, cudaStream_t stream,
                                        const char* op);

}  // namespace tetra::cuda
