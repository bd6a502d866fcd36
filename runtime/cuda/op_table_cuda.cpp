// The CUDA backend's op table (runtime/op_table.h).
#include "runtime/op_table.h"

#include "runtime/cuda/cuda_ops.h"

namespace tetra::cuda {

namespace {
#define TETRA_CUDA_OP(name) .name = &cuda::name,
const OpTable table = {TETRA_OPS(TETRA_CUDA_OP).adamw_update_multi = &cuda::adamw_update_multi};
#undef TETRA_CUDA_OP
}  // namespace

const OpTable* const op_table = &table;

}  // namespace tetra::cuda
