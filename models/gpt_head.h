// GPT-2 output layer: final LayerNorm, then the LM head tied to the token embedding and the fused
// softmax cross-entropy (models/output_projection.h: in training the logits' gradient is written in
// place of the logits, so the [N, V] logits tensor is the only one of that size per micro-batch).
// Tensor-parallel (vocabulary-parallel output, loss parallel): wte is this rank's vocabulary rows
// [V/tp, C]; the final LayerNorm runs on this rank's rows (its sequence shard with sequence
// parallelism); the projection gathers them and never gathers the logits.
#pragma once
#include "models/gpt_config.h"
#include "models/layer.h"
#include "models/modules.h"
#include "models/output_projection.h"

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
  void set_tensor_parallel(TensorParallel* tp) { proj_.tp = tp; }

 private:
  GptConfig cfg_;
  OutputProjection proj_;  // wte
  LayerNorm ln_f_;
};

}  // namespace tetra
