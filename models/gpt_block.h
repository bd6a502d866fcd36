// One GPT-2 transformer block, pre-LayerNorm:
//   x2 = x + c_proj(attn(c_attn(ln_1(x))))
//   y  = x2 + mlp.c_proj(gelu(mlp.c_fc(ln_2(x2))))
// Activations are [N, C] with N = B·T tokens.
#pragma once
#include "models/gpt_config.h"
#include "models/layer.h"
#include "models/modules.h"

namespace tetra {

class GptBlock : public Layer {
 public:
  GptBlock(const GptConfig& cfg, int block_index);
  std::string name() const override { return "h." + std::to_string(block_); }
  std::vector<Param*> params() override;
  Tensor forward(MicroBatchContext& ctx, const Tensor& x) override;
  Tensor backward_input(MicroBatchContext& ctx, const Tensor& dy) override;
  void backward_weight(MicroBatchContext& ctx) override;

 private:
  struct Saved;
  void run_attention_half(MicroBatchContext& ctx, Saved& s);  // x → x2
  void run_mlp_half(MicroBatchContext& ctx, Saved& s, Tensor* y);  // x2 → y (y null: recompute only)

  GptConfig cfg_;
  int block_;
  LayerNorm ln_1_, ln_2_;
  Linear c_attn_, attn_proj_, c_fc_, mlp_proj_;
};

}  // namespace tetra
