// The FP8 GEMMs of a tensor-parallel Linear (models/modules.h; docs/kernels.md "FP8 training"): the
// recipe's casts and GEMMs (models/fp8_linear.h) with the scales the tp = 1 run would use, handed to
// the tensor-parallel steps as tp::LinearGemms (parallel/tensor/linear.h), which call them per chunk.
//
// A tensor split over the tp group — a column-parallel weight's rows, a row-parallel weight's
// columns, a row-parallel input [N, I/tp], a column-parallel output gradient [N, O/tp], a
// sequence-parallel shard [N/tp, ·] — is cast under tensorwise with the amax of the whole: each rank
// takes its part's amax (ops::fp8_amax) and the group all-reduces the max (4 bytes), so every rank
// casts with the scale the whole tensor gets at tp = 1. A tensor every rank holds whole (a
// replicated or gathered input, a gathered or replicated gradient) needs no reduction. Blockwise
// scales each 1×128 tile or 128×128 block on its own: where the slices are multiples of 128 wide
// (the model checks it: Linear::set_tensor_parallel) every group lies inside one rank's slice, so the
// local casts are the tp = 1 run's groups; 128×1 tiles of the transposed copies run over tokens,
// which a weight gradient always has whole.
//
// Chunks: the tensor-parallel steps run the GEMMs on row chunks of N/tp tokens; each chunk is cast
// on its own with the whole tensor's amax (tensorwise) or its rows' own 1×128 tiles (blockwise),
// which are the codes and scales of casting the whole tensor at once. The weight is cast once per
// call. Sequence parallelism's column-parallel input crosses the wire already cast where the recipe
// allows (gathered_forward): under tensorwise each rank casts its own shard [M, I] with the whole's
// amax — the codes the cast of the gathered [N, I] writes, bit for bit — and the group gathers the
// E4M3 codes (a byte an element); the weight gradient's xᵀ [I, N] is those codes transposed
// (ops::fp8_transpose: the cast's own transposed copy, bit for bit), kept in Fp8Saved. Blockwise
// gathers in the working dtype and casts each gathered chunk: its xᵀ takes 128×1 tiles over tokens,
// which the 1×128 codes of the forward cannot give, so the weight gradient needs x itself. The
// row-parallel output gradient is gathered in the working dtype (its GEMMs cast each chunk).
#pragma once

#include "models/fp8_linear.h"
#include "parallel/tensor/linear.h"

namespace tetra {

class TensorParallel;

namespace fp8_tp {

// Whether a tensor is split over the tp group (its amax is all-reduced) or whole on every rank.
enum class Part { Whole, Split };

// The forward GEMMs of a layer whose weight slice is w, for input x (its rows the GEMMs' rows,
// `x_part` whether x is split over the group). recipe None: empty (the plain ops).
tp::LinearGemms forward(Fp8Recipe recipe, TensorParallel& tp, const Tensor& w, const Tensor& x, Part x_part);
// A sequence-parallel column-parallel layer's forward GEMMs for its shard x_shard [M, I]: under
// tensorwise with `keep` given, the shard is cast before the gather (tp::LinearGemms::gather_shard)
// and keep->x_t receives xᵀ [I, N] for backward_weight (the caller's gathered x is then not written);
// else forward(recipe, tp, w, x_shard, Part::Split), the working-dtype gather.
tp::LinearGemms gathered_forward(Fp8Recipe recipe, TensorParallel& tp, const Tensor& w, const Tensor& x_shard,
                                 Fp8Saved* keep);
// Whether gathered_forward casts before the gather (the caller need not give a gathered-x buffer
// for the weight gradient).
bool casts_before_gather(Fp8Recipe recipe, const Fp8Saved* keep);
// Bytes per element a sequence-parallel column-parallel layer keeps of its gathered input for the
// weight gradient (the memory plans): the codes of xᵀ (a byte) where gathered_forward casts before
// the gather and the forward keeps (`keeps`), else the gathered input at value_bytes.
double sp_kept_input(Fp8Recipe recipe, double value_bytes, bool keeps);
// The input-gradient GEMMs for output gradient dy (`dy_part` as above).
tp::LinearGemms backward_input(Fp8Recipe recipe, TensorParallel& tp, const Tensor& w, const Tensor& dy, Part dy_part);
// dw[O', I'] += dy[N, O']ᵀ · x[N, I'] in FP8 (recipe not None). kept (may be null): kept->x_t, where
// gathered_forward left it, is read in place of casting x (x may then be undefined) and released.
void backward_weight(Fp8Recipe recipe, TensorParallel& tp, Tensor& dw, const Tensor& dy, Part dy_part, const Tensor& x,
                     Part x_part, Fp8Saved* kept = nullptr);

}  // namespace fp8_tp

}  // namespace tetra
