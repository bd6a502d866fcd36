// CPU kernels (fp32 compute; bf16 tensors are converted on the fly). Same contracts as runtime/ops.h:
// one kernel per op of runtime/op_list.h, of the op's type (so with the op's parameters, but no
// default arguments).
#pragma once
#include "runtime/multi_tensor.h"
#include "runtime/op_list.h"
#include "runtime/ops.h"

namespace tetra::cpu {

using ops::Activation;
using ops::AdamWHyper;

#define TETRA_CPU_DECLARE(name) ops::op_type::name name;
TETRA_OPS(TETRA_CPU_DECLARE)
#undef TETRA_CPU_DECLARE

// Multi-tensor AdamW (runtime/multi_tensor.h): adamw_update on each segment in turn.
decltype(ops::adamw_update_multi) adamw_update_multi;

// row_amax[i] = the amax bits of row i of y [..., C] (ops.h's row_amax outputs), for the rows
// [first, first + count) (count −1: all), the others untouched. U32 [rows] checked by ops.cpp.
void fp8_row_amax(Tensor& row_amax, const Tensor& y, int64_t first = 0, int64_t count = -1);

}  // namespace tetra::cpu
