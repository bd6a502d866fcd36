// GPT-2 input layer: token embedding (wte, shared with the LM head) plus learned positions (wpe).
#pragma once
#include "models/gpt_config.h"
#include "models/layer.h"

namespace tetra {

class GptEmbedding : public Layer {
 public:
  // `wte` is owned by the model because the LM head uses the same matrix (tied weights).
  GptEmbedding(const GptConfig& cfg, Param* wte);
  std::string name() const override { return "embedding"; }
  std::vector<Param*> params() override { return {wte_, &wpe_}; }
  // x: ids int32 [B, T] → y [B·T, C]
  Tensor forward(MicroBatchContext& ctx, const Tensor& ids) override;
  // Keeps dy for backward_weight; an embedding has no input gradient (returns undefined).
  Tensor backward_input(MicroBatchContext& ctx, const Tensor& dy) override;
  void backward_weight(MicroBatchContext& ctx) override;

 private:
  GptConfig cfg_;
  Param* wte_;
  Param wpe_;
};

}  // namespace tetra
