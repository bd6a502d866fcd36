// The op table: one function pointer per op of runtime/ops.h (the list in runtime/op_list.h) and the
// multi-tensor AdamW of runtime/multi_tensor.h, each of the type of the op's declaration there. Each
// backend fills one: the CPU in runtime/cpu/op_table.cpp, CUDA in runtime/cuda/op_table_cuda.cpp.
// The ops of ops.h look up the table of their tensors' device and call through it.
#pragma once
#include "runtime/multi_tensor.h"
#include "runtime/op_list.h"
#include "runtime/ops.h"

namespace tetra {

struct OpTable {
#define TETRA_OP_POINTER(name) ops::op_type::name* name;
  TETRA_OPS(TETRA_OP_POINTER)
#undef TETRA_OP_POINTER
  decltype(&ops::adamw_update_multi) adamw_update_multi;
};

namespace cpu {
extern const OpTable op_table;
}  // namespace cpu

namespace cuda {
// Null where tetra was built without CUDA (runtime/cuda/op_table_stub.cpp).
extern const OpTable* const op_table;
}  // namespace cuda

// The table of `device`'s backend; where tetra was built without CUDA, a CUDA device is an error
// that names `op`.
const OpTable& op_table_for(const char* op, Device device);

}  // namespace tetra
