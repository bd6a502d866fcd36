// GPT-2 output layer: final LayerNorm, LM head tied to the token embedding, and the fused
// softmax cross-entropy. In training its forward also writes the logits' gradient (in place of
// the logits), so the [N, V] logits tensor is the only one of that size per micro-batch.
#pragma once
#include "models/gpt_config.h"
#include "models/layer.h"
#include "models/modules.h"

namespace tetra {

class GptHead : public Layer {
 public:
  GptHead(const GptConfig& cfg, Param* wte, int layer_index);
  std::string name() const override { return "head"; }
  std::vector<Param*> params() override;
  // x [N, C] → per-token losses fp32 [N] (also stored in ctx.losses). Targets come from ctx.
  Tensor forward(MicroBatchContext& ctx, const Tensor& x) override;
  // dy is ignored: the loss gradient scale is ctx.loss_grad_scale. Returns dx [N, C].
  Tensor backward_input(MicroBatchContext& ctx, const Tensor& dy) override;
  void backward_weight(MicroBatchContext& ctx) override;

 private:
  GptConfig cfg_;
  Param* wte_;
  LayerNorm ln_f_;
};

}  // namespace tetra
