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
// call. Sequence parallelism gathers the input (and the row-parallel output gradient) in the
// working dtype and casts each gathered chunk (docs/kernels.md says why not the shard before it).
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
// The input-gradient GEMMs for output gradient dy (`dy_part` as above).
tp::LinearGemms backward_input(Fp8Recipe recipe, TensorParallel& tp, const Tensor& w, const Tensor& dy, Part dy_part);
// dw[O', I'] += dy[N, O']ᵀ · x[N, I'] in FP8 (recipe not None).
void backward_weight(Fp8Recipe recipe, TensorParallel& tp, Tensor& dw, const Tensor& dy, Part dy_part, const Tensor& x,
                     Part x_part);

}  // namespace fp8_tp

}  // namespace tetra
