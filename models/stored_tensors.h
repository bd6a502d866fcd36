// How a model's parameters are stored in consolidated checkpoints and Hugging Face folders
// (ARCHITECTURE.md §6): one tensor per Param under its name, or one per named part of a fused Param
// (Param::parts: Llama's q/k/v_proj of a fused qkv, gate/up_proj of a fused gate_up), transposed
// where the checkpoint's layout is (GPT-2's Conv1D stores [in, out]).
#pragma once
#include <string>
#include <vector>

#include "parallel/param.h"

namespace tetra {

// One tensor of a checkpoint file and where its values lie in a Param's full tensor.
struct StoredTensor {
  std::string name;          // the file's name (Hugging Face's)
  Shape shape;               // as the file stores it
  int64_t row_begin = 0;     // rows [row_begin, row_begin + rows) of the Param's full tensor
  int64_t rows = 0;
  bool transposed = false;   // the file holds the transpose of those rows (2-d only)
};

// The stored tensors of `p`, in file order.
std::vector<StoredTensor> stored_tensors(const Param& p);

// The file's tensor `t` of `p` from p's full value (host fp32, tetra layout).
Tensor to_stored(const StoredTensor& t, const Tensor& full);
// Writes the file's tensor `stored` (host fp32, the file's layout) into the rows of `full`.
void from_stored(const StoredTensor& t, const Tensor& stored, Tensor& full);

// [rows, cols] → [cols, rows] on the host (fp32).
Tensor transpose_host(const Tensor& m);

}  // namespace tetra
