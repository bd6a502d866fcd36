// The per-expert Tensorwise casts of the grouped FP8 expert GEMMs (runtime/cuda/moe_grouped_fp8.cu):
// one amax and one scale per segment (an expert's rows of a row tensor, or one expert's weight),
// then the codes, in the operand's own layout or transposed for the tensor-core kernel
// (runtime/cuda/moe_grouped_gemm.h, GroupedGemm::fp8_transposed). Stream-ordered, no host
// synchronisation (a CUDA graph captures them).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "runtime/fp8_format.h"
#include "runtime/ops.h"
#include "runtime/tensor.h"

namespace tetra::cuda {

// The segments of a [rows, cols] tensor that are cast apart: the experts' rows of a row tensor (from
// the offsets) or the G weights w[g], O rows each.
struct Segments {
  const int32_t* offsets = nullptr;  // row tensors; null for weights
  int G = 0;
  int64_t R = 0;  // rows of a row tensor
  int64_t O = 0;  // weights: rows per expert
  int64_t cols = 0;
  // Row tensors read through a gather (moe_permute_fp8_cast): row r of the segments is x's row
  // gather[r] / top_k (moe_permute's slot_of); null: row r of x.
  const int32_t* gather = nullptr;
  int64_t top_k = 1;
  // With a gather (moe_permute_fp8_cast's weights): row r is x's row times row_weight[gather[r]] in
  // fp32, rounded to x's type (moe_unpermute_backward's d_rows); null: x's row as it is.
  const float* row_weight = nullptr;
};

// Where the codes go:
//   Rows: the operand's shape and layout.
//   Transposed: weights [G, O, I] → [G, I, O] (w[g]ᵀ); row tensors [R, cols] → [cols, Rp], expert g's
//     rows at columns [po[g], po[g + 1]) and zero codes up to po[g + 1] (padded_offsets; past po[G]
//     the codes are not written).
struct CodeLayout {
  bool transposed = false;
  const int32_t* padded_offsets = nullptr;  // row tensors, transposed: po, int32 [G + 1] on the device
  int64_t Rp = 0;                           // row tensors, transposed: the columns of the codes
};

// One operand cast per expert: codes (format c.format) and scale [G] (fp32, the dequantisation scale).
struct ExpertCodes {
  Tensor q, scale;
};

ExpertCodes cast_segments(const Tensor& x, ops::Fp8Cast c, const Segments& s, const CodeLayout& layout, Device dev,
                          cudaStream_t stream, const char* op);

// Both layouts of one operand (ops::moe_grouped_fp8_cast): q in x's layout (a row tensor's rows
// outside every expert are not written), q_t in `transposed`'s (transposed must be true), one scale
// per expert; one amax pass and, where the vector kernels apply, one pass writing both. given_amax
// (may be null): the amax bits as x's producer measured them, which replace the amax pass over x: a
// row tensor's per row [R] (a pass over them instead), the weights' per expert [G] (taken as they are).
struct BothCodes {
  Tensor q, q_t, scale;
};
BothCodes cast_segments_both(const Tensor& x, ops::Fp8Cast c, const Segments& s, const CodeLayout& transposed,
                             Device dev, cudaStream_t stream, const char* op, const unsigned* given_amax = nullptr);

// The row layout [R, cols] of a row tensor's codes out of their transposed layout `transposed` (the
// weight gradient's SIMT kernel given x as moe_permute_fp8_cast's codes alone): each expert's rows;
// rows outside every expert are not written.
Tensor rows_from_transposed(const Tensor& q_t, const Segments& s, const CodeLayout& transposed, Device dev,
                            cudaStream_t stream);

// The rows moe_permute gathers (s.gather: slot_of, s.top_k) cast as cast_segments_both casts them,
// written with them in one pass over x [N, cols] (ops::moe_permute_fp8_cast): x's rows' amaxes, each
// expert's as the largest over its rows' tokens, then the rows (into `rows`, x's dtype) and both
// layouts (rows may be undefined: the codes alone). With s.row_weight the rows are scaled and rounded
// as they are read, their amaxes from the tokens' likewise. Needs cols a multiple of 8 and x, rows
// 16-byte aligned and of one dtype (gathered_cast_applies).
bool gathered_cast_applies(const Tensor& rows, const Tensor& x);
// How moe_permute_fp8_cast makes them (TETRA_MOE_GATHERED_CAST, read on every call; measured in
// docs/kernels.md, "FP8 training v11"): Scatter (unset or "scatter") reads x token by token, once,
// writes each token's codes into its slots' rows, then transposes the codes; Gather ("gather") reads
// x through the gather into the transposing cast, each token once a slot; Separate ("separate") runs
// moe_permute, then the cast of the rows (ops::moe_grouped_fp8_cast with the rows' amaxes).
enum class GatheredCast { Scatter, Gather, Separate };
GatheredCast gathered_cast_kind();
// given_token_amax (U32 [N], may be null): x's rows' amaxes as their writer measured them, in place
// of the pass that measures them.
BothCodes cast_gathered_both(Tensor& rows, const Tensor& x, ops::Fp8Cast c, const Segments& s,
                             const CodeLayout& transposed, Device dev, cudaStream_t stream, const char* op,
                             const unsigned* given_token_amax = nullptr);

// A dense x [M, K] (fp32 or bf16, row-major) cast Tensorwise in both layouts by the transposing vector
// kernel, x taken as one weight of M rows (fp8_quantize's Tensorwise cast with q_t): q [M, K],
// q_t [K, M] and scale [1] = 1 / fp8_quant_factor(amax) from amax_bits (U32 [1] on the device), the
// tile kernel's codes and scale bit for bit. dense_cast_applies: K a multiple of 8, x 16-byte and q,
// q_t 8-byte aligned, and the grid within CUDA's limits.
bool dense_cast_applies(const Tensor& x, int64_t M, int64_t K, const void* q, const void* q_t);
void cast_dense_both(const Tensor& x, int64_t M, int64_t K, Fp8Format f, const unsigned* amax_bits, unsigned char* q,
                     unsigned char* q_t, float* scale, cudaStream_t stream);

// rows[r, :] = weights[slot_of[r]] · rows[r, :] in fp32, rounded to rows' dtype (rows [R, cols], slot_of
// int32 [R], weights fp32 [N·k]): moe_permute's rows made moe_unpermute_backward's d_rows, where the
// gathered cast does not apply. Rows whose slot_of is no slot (moe_permute's zero rows) stay zero.
void scale_gathered_rows(Tensor& rows, const Tensor& slot_of, const Tensor& weights, cudaStream_t stream);

// po[0] = 0, po[g + 1] = po[g] + round_up(rows of expert g, 128): int32 [G + 1] on the device.
Tensor padded_offsets(const int32_t* offsets, int G, int64_t R, Device dev, cudaStream_t stream);

}  // namespace tetra::cuda
