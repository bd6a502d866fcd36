// Param: one trainable tensor of a model — its PyTorch-style name (checkpoints), its full shape,
// how it is split over the mesh, and this rank's working value and gradient.
// Values and gradients are views into flat buffers owned by a ParamSet, so data-parallel buckets
// and ZeRO shards are contiguous ranges of one buffer.
#pragma once
#include <string>
#include <vector>

#include "runtime/tensor.h"

namespace tetra {

enum class ParamSplit {
  Replicated,  // full copy on every rank of the tensor-parallel group
  TpColumn,    // output features (dim 0) split over tp
  TpRow,       // input features (dim 1) split over tp
  Expert,      // owned by one expert-parallel rank
};

struct Param {
  std::string name;         // e.g. "transformer.h.0.attn.c_attn.weight"
  Shape full_shape;         // tetra layout, unsplit ([out, in] for linear weights)
  Shape local_shape;        // this rank's piece
  ParamSplit split = ParamSplit::Replicated;
  bool weight_decay = true;  // PyTorch convention here: tensors of 2+ dims decay, biases/norms don't
  // The consolidated (PyTorch) layout is the transpose of tetra's (GPT-2 Conv1D stores [in, out]).
  bool transposed_in_checkpoint = false;
  // Which layer (FSDP unit / gradient bucket boundary) the parameter belongs to.
  int layer_index = 0;
  // Other layers that also read this parameter (tied weights: GPT-2's LM head reads wte, owned by
  // the embedding). FSDP keeps such a unit gathered while any of its layers still needs it.
  std::vector<int> tied_layers;
  // Standard deviation of the normal init (0 with init_value set: constant fill).
  float init_std = 0.02f;
  float init_value = 0.0f;
  bool init_constant = false;

  Tensor value;  // working weights: fp32 on the CPU, bf16 on CUDA
  Tensor grad;   // gradient, accumulated over micro-batches
  int64_t offset = 0;  // element offset of this param in its ParamSet's flat buffers
  int64_t numel() const { return shape_numel(local_shape); }
};

}  // namespace tetra
