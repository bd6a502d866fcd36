// Llama input layer: the token embedding alone (positions enter through the rotary embedding in
// every block). The model owns the matrix: a tied output layer reads it too.
#pragma once
#include "models/layer.h"
#include "models/llama_config.h"
#include "models/vocab_embedding.h"

namespace tetra {

class LlamaEmbedding : public Layer {
 public:
  LlamaEmbedding(const LlamaConfig& cfg, Param* embed_tokens);
  std::string name() const override { return "embedding"; }
  std::vector<Param*> params() override { return {embed_}; }
  // ids int32 [B, T] → y [B·T, C]
  Tensor forward(MicroBatchContext& ctx, const Tensor& ids) override;
  // Keeps dy for backward_weight; an embedding has no input gradient (returns undefined).
  Tensor backward_input(MicroBatchContext& ctx, const Tensor& dy) override;
  void backward_weight(MicroBatchContext& ctx) override;
  // Vocabulary-parallel (models/vocab_embedding.h, without positions).
  void set_tensor_parallel(TensorParallel* tp) { lookup_.tp = tp; }

 private:
  LlamaConfig cfg_;
  Param* embed_;
  VocabEmbedding lookup_;
};

}  // namespace tetra
