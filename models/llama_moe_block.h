// A Llama decoder block whose MLP is DeepSeek-V3's mixture of experts (models/moe_mlp.h):
//   x2 = x + o_proj(attn(rope(qkv_proj(input_layernorm(x)))))        (models/llama_attention.h)
//   y  = x2 + shared_experts(h2) + Σ_j w_j · expert_{id_j}(h2),  h2 = post_attention_layernorm(x2)
// Activations [N, C], N = B·T tokens. The forward runs in four phases and the input backward in
// three (Layer::forward_phase): attention, router and permutation | dispatch and shared experts |
// routed experts | combine; and back. Each phase but the last ends by issuing the expert-parallel
// exchange the next one waits for (nothing without expert parallelism), so two micro-batches can
// interleave at them (models/layer_pass.h).
#pragma once
#include "models/layer.h"
#include "models/llama_attention.h"
#include "models/llama_config.h"
#include "models/modules.h"
#include "models/moe_mlp.h"

namespace tetra {

class LlamaMoeBlock : public Layer {
 public:
  LlamaMoeBlock(const LlamaConfig& cfg, int block_index);
  std::string name() const override { return "layers." + std::to_string(block_); }
  std::vector<Param*> params() override;
  Tensor forward(MicroBatchContext& ctx, const Tensor& x) override;
  Tensor backward_input(MicroBatchContext& ctx, const Tensor& dy) override;
  void backward_weight(MicroBatchContext& ctx) override;
  int forward_phases() const override { return 4; }
  int backward_phases() const override { return 3; }
  Tensor forward_phase(MicroBatchContext& ctx, const Tensor& x, int phase) override;
  Tensor backward_phase(MicroBatchContext& ctx, const Tensor& dy, int phase) override;

  MoeMlp* moe() override { return &moe_; }

 private:
  struct Saved;
  Tensor run_forward_phase(MicroBatchContext& ctx, Saved& s, const Tensor& x, int phase);

  LlamaConfig cfg_;
  int block_;
  LlamaAttention attention_;
  RMSNorm post_norm_;
  MoeMlp moe_;
};

}  // namespace tetra
