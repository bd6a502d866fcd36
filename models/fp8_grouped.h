// The routed experts' grouped GEMMs under train.fp8.recipe (models/fp8_linear.h; docs/kernels.md "FP8
// training"): the three GEMMs of each expert's y = x·w[g]ᵀ with the recipe's casts applied expert by
// expert (runtime/ops.h moe_grouped_fp8_*: one tensorwise scale per expert's rows and per expert's
// weight; blockwise 1×128 tiles of the rows, 128-row runs of each expert's rows for the weight
// gradient's transposed operands, 128×128 blocks of each w[g]). Recipe none runs the grouped GEMMs of
// the working dtype (moe_grouped_linear_*). Shapes and offsets as those: x [R, I], y [R, O],
// w [G, O, I], offsets int32 [G + 1] on the device.
//
// Tensorwise casts each row tensor once for the two GEMMs that read it (cast_rows: x for the forward
// and the weight gradient, dy for the input and weight gradients; both layouts in one pass), the
// caller keeping the codes in between; the functions take them as `codes` (null: cast there). The
// experts' weights are cast once a step likewise (step_weight), under blockwise too where each
// expert's rows are whole 128-row blocks. Blockwise casts its row tensors ahead too where they are
// whole 1×128 groups wide (casts_rows_ahead): their 1×128 rows for the forward or input gradient and
// their 128×1 runs for the weight gradient from one read.
#pragma once
#include "models/fp8_linear.h"

namespace tetra::fp8_grouped {

// Whether `recipe` casts every row tensor ahead, each expert's amax measured by the op that writes it
// and x_e's and d_out_e's codes gathered in the permutation (tensorwise).
bool casts_ahead(Fp8Recipe recipe);
// Whether a row tensor [R, cols] is cast ahead in both layouts: casts_ahead, or blockwise where cols
// are whole 1×128 groups.
bool casts_rows_ahead(Fp8Recipe recipe, int64_t cols);
// x [R, cols] cast per expert as `recipe` casts an activation (gradient false) or a gradient, in
// both layouts (ops::moe_grouped_fp8_cast); only where casts_rows_ahead(recipe, cols). row_amax (may
// be null or undefined; tensorwise only): x's rows' amaxes as the op that wrote x measured them
// (ops.h row_amax; the cast then reads x once).
ops::Fp8GroupedCodes cast_rows(Fp8Recipe recipe, const Tensor& x, const Tensor& offsets, bool gradient,
                               const Tensor* row_amax = nullptr);
// The codes of x's rows gathered by slot_of / top_k (the rows ops::moe_permute would write, never
// written), cast per expert as cast_rows casts an activation (gradient false) or a gradient, in one
// pass over x (ops::moe_permute_fp8_cast); only where casts_ahead(recipe). weights (fp32 [N, top_k],
// may be null): each row scaled by its slot's weight, as moe_unpermute_backward writes d_rows from
// dy = x. token_amax (may be null or undefined): x's rows' amaxes as the op that wrote x measured them
// (the norm's row_amax; the cast then reads x once).
ops::Fp8GroupedCodes permute_rows(Fp8Recipe recipe, const Tensor& x, const Tensor& slot_of, int64_t top_k,
                                  const Tensor& offsets, bool gradient = false, const Tensor* weights = nullptr,
                                  const Tensor* token_amax = nullptr);
// Where the op writing x [rows, ·] leaves its rows' amaxes for cast_rows: `slot` made U32 [rows] on
// `device` where the recipe casts ahead (else null, and the slot is left alone).
Tensor* row_amax_slot(Fp8Recipe recipe, Tensor& slot, int64_t rows, Device device);

// Whether the experts' stacked weights [G, O, I] are cast once a step under `recipe` (step_weight):
// tensorwise, and blockwise where O is a multiple of 128 (the stack's 128×128 blocks are then each
// expert's own; ops.h Fp8GroupedCodes).
bool casts_weights_once(Fp8Recipe recipe, int64_t O);
// The weight param `w` (its stacked value viewed as `w_view` [G, O, I]) cast for this step: its
// Param::fp8_step copy, made at the first call of the step with both layouts; undefined outside a
// step, where the copy is not enabled (ZeRO-3, Fp8StepWeights) or not casts_weights_once.
ops::Fp8GroupedCodes step_weight(Fp8Recipe recipe, const Param& w, const Tensor& w_view);

// y[rows of g] = x[rows of g] · w[g]ᵀ.
void forward(Fp8Recipe recipe, Tensor& y, const Tensor& x, const Tensor& w, const Tensor& offsets,
             const ops::Fp8GroupedCodes* x_codes = nullptr, const ops::Fp8GroupedCodes* w_codes = nullptr);
// dx[rows of g] = dy[rows of g] · w[g].
void backward_input(Fp8Recipe recipe, Tensor& dx, const Tensor& dy, const Tensor& w, const Tensor& offsets,
                    const ops::Fp8GroupedCodes* dy_codes = nullptr, const ops::Fp8GroupedCodes* w_codes = nullptr);
// dw[g] (+)= dy[rows of g]ᵀ · x[rows of g] (an expert without rows: 0, or kept when accumulating).
void backward_weight(Fp8Recipe recipe, Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& offsets,
                     bool accumulate, const ops::Fp8GroupedCodes* dy_codes = nullptr,
                     const ops::Fp8GroupedCodes* x_codes = nullptr);

}  // namespace tetra::fp8_grouped
