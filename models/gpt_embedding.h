// GPT-2 input layer: token embedding (wte, shared with the LM head) plus learned positions (wpe).
// Tensor-parallel: a vocabulary-parallel lookup (models/vocab_embedding.h), wte this rank's
// vocabulary rows [V/tp, C], wpe replicated (added by tp rank 0).
#pragma once
#include "models/gpt_config.h"
#include "models/layer.h"
#include "models/vocab_embedding.h"

namespace tetra {

class GptEmbedding : public Layer {
 public:
  // `wte` is owned by the model because the LM head uses the same matrix (tied weights).
  GptEmbedding(const GptConfig& cfg, Param* wte);
  std::string name() const override { return "embedding"; }
  std::vector<Param*> params() override { return {wte_, &wpe_}; }
  // x: ids int32 [B, T] → y [B·T, C] (tensor-parallel with sequence parallelism: [B·T/tp, C])
  Tensor forward(MicroBatchContext& ctx, const Tensor& ids) override;
  // Keeps dy for backward_weight; an embedding has no input gradient (returns undefined).
  Tensor backward_input(MicroBatchContext& ctx, const Tensor& dy) override;
  void backward_weight(MicroBatchContext& ctx) override;
  void set_tensor_parallel(TensorParallel* tp) { lookup_.tp = tp; }

 private:
  GptConfig cfg_;
  Param* wte_;
  Param wpe_;
  VocabEmbedding lookup_;  // wte_ + wpe_
};

}  // namespace tetra
