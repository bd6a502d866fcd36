// CUDA kernels (bf16 storage, fp32 accumulation). Same contracts as runtime/ops.h: one kernel per op
// of runtime/op_list.h, of the op's type (so with the op's parameters, but no default arguments).
#pragma once
#include "runtime/multi_tensor.h"
#include "runtime/op_list.h"
#include "runtime/ops.h"

namespace tetra::cuda {

using ops::Activation;
using ops::AdamWHyper;

#define TETRA_CUDA_DECLARE(name) ops::op_type::name name;
TETRA_OPS(TETRA_CUDA_DECLARE)
#undef TETRA_CUDA_DECLARE

// Multi-tensor AdamW (runtime/multi_tensor.h): one launch per batch of up to 256 segments.
decltype(ops::adamw_update_multi) adamw_update_multi;

}  // namespace tetra::cuda
