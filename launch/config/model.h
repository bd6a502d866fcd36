// The model a config describes, in models/'s terms: launch/ converts its Config once and from then
// on talks to the family (models/model_family.h) only, never to a family by name.
#pragma once
#include "launch/config/config.h"
#include "models/model_family.h"

namespace tetra::launch {

// model.* (and train.recompute) as ModelArgs.
ModelArgs model_args(const Config& cfg);
// The family of model.arch.
const ModelFamily& model_family_of(const Config& cfg);
// The dtype of the working activations: bf16 under train.precision bf16, else fp32.
DType activation_dtype(const Config& cfg);
// The residual stream's dtype (the hidden states between blocks and their gradients): fp32 under
// train.residual_dtype fp32 or fp32 precision, else the activations' (docs/models.md).
DType residual_dtype(const Config& cfg);
// AdamW's exp_avg and exp_avg_sq: optimizer.state_dtype (fp32 or bf16).
DType optimizer_state_dtype(const Config& cfg);
// One micro-batch of training: train.micro_batch × train.seq_len at the working dtype's width
// (train.precision bf16: 2 bytes, else 4) and the residual stream's, on one of parallel.tp ranks.
ActivationShape activation_shape(const Config& cfg);

}  // namespace tetra::launch
