// Llama output layer: final RMSNorm (model.norm), then the output layer (lm_head, or the token
// embedding when tied) and the fused softmax cross-entropy (models/output_projection.h: the logits'
// gradient in place of the logits, [N, V] allocated once per micro-batch). Tensor-parallel (as
// models/gpt_head.h): the output layer is this rank's vocabulary rows, the logits never gathered.
#pragma once
#include "models/layer.h"
#include "models/llama_config.h"
#include "models/modules.h"
#include "models/output_projection.h"

namespace tetra {

class LlamaHead : public Layer {
 public:
  // `tied`: the embedding's matrix, or nullptr for an own lm_head.weight.
  LlamaHead(const LlamaConfig& cfg, Param* tied, int layer_index);
  std::string name() const override { return "head"; }
  std::vector<Param*> params() override;
  // x [N, C] → per-token losses fp32 [N] (also stored in ctx.losses). Targets come from ctx.
  Tensor forward(MicroBatchContext& ctx, const Tensor& x) override;
  // dy is ignored: the loss gradient scale is ctx.loss_grad_scale. Returns dx [N, C].
  Tensor backward_input(MicroBatchContext& ctx, const Tensor& dy) override;
  void backward_weight(MicroBatchContext& ctx) override;
  void set_tensor_parallel(TensorParallel* tp) { proj_.tp = tp; }

 private:
  LlamaConfig cfg_;
  RMSNorm norm_;
  Param lm_head_;          // used when untied
  OutputProjection proj_;  // &lm_head_ or the tied embedding
};

}  // namespace tetra
