// GPT-2 output layer: final LayerNorm, LM head tied to the token embedding, and the fused
// softmax cross-entropy. In training its forward also writes the logits' gradient (in place of
// the logits), so the [N, V] logits tensor is the only one of that size per micro-batch.
// Tensor-parallel (vocabulary-parallel output, loss parallel): wte is this rank's vocabulary rows
// [V/tp, C]; the final LayerNorm runs on this rank's rows (its sequence shard with sequence
// parallelism), its output is gathered to [N, C], the logits are [N, V/tp], and the loss comes from
// per-row statistics all-gathered over tp (ops::cross_entropy_shard_stats / _from_stats) without
// ever gathering the logits. The input gradient is reduce-scattered (all-reduced without sequence
// parallelism) from the ranks' partial products.
#pragma once
#include "models/gpt_config.h"
#include "models/layer.h"
#include "models/modules.h"
#include "parallel/tensor_parallel.h"

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
  void set_tensor_parallel(TensorParallel* tp) { tp_ = tp; }

 private:
  void tp_loss(MicroBatchContext& ctx, Tensor& logits);
  GptConfig cfg_;
  TensorParallel* tp_ = nullptr;
  Param* wte_;
  LayerNorm ln_f_;
};

}  // namespace tetra
