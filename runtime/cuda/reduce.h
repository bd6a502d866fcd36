// Reductions that several CUDA ops share (their kernels live in runtime/cuda/reduce.cu).
#pragma once
#include "runtime/tensor.h"

namespace tetra::cuda {

// out[C] (+)= Σ_r in[r, c] for `in` viewed as [R, C] row-major (fp32 or bf16, either side).
// Deterministic: fixed row groups summed in fixed order, fp32 accumulation. Used for bias
// gradients. fp32 inputs of at most 64 rows (sums taken elsewhere, e.g. by a LayerNorm backward)
// are folded in one launch. Runs on the current stream of out's device (DeviceScope set by caller).
void column_sum(Tensor& out, const Tensor& in, int64_t rows, int64_t cols, bool accumulate);

}  // namespace tetra::cuda
