// The CUDA op table where tetra is built without CUDA: none (runtime/op_table.h). The ops then
// reject tensors on a CUDA device, saying that tetra was built without CUDA (runtime/ops.cpp).
#include "runtime/op_table.h"

namespace tetra::cuda {

const OpTable* const op_table = nullptr;

}  // namespace tetra::cuda
