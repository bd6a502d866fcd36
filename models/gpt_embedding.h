// GPT-2 input layer: token embedding (wte, shared with the LM head) plus learned positions (wpe).
// Tensor-parallel (vocabulary-parallel embedding): wte is this rank's vocabulary rows [V/tp, C];
// each rank looks up the ids in its rows (zero rows elsewhere; tp rank 0 adds the positions) and the
// partial lookups are summed over tp — reduce-scattered into this rank's sequence shard [N/tp, C]
// with sequence parallelism, all-reduced to [N, C] without.
#pragma once
#include "models/gpt_config.h"
#include "models/layer.h"
#include "parallel/tensor/tensor_parallel.h"

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
  void set_tensor_parallel(TensorParallel* tp) { tp_ = tp; }

 private:
  GptConfig cfg_;
  TensorParallel* tp_ = nullptr;
  Param* wte_;
  Param wpe_;
};

}  // namespace tetra
