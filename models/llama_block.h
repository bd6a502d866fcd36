// One Llama decoder block, pre-RMSNorm (Hugging Face LlamaDecoderLayer):
//   x2 = x + o_proj(attn(rope(qkv_proj(input_layernorm(x)))))
//   y  = x2 + down_proj(silu(gate) · up),  [gate | up] = gate_up_proj(post_attention_layernorm(x2))
// Activations are [N, C] with N = B·T tokens. q/k/v are one fused projection of
// [(H + 2·Hkv)·D, C] and gate/up one of [2F, C]; their parts carry Hugging Face's separate names.
// The residual adds are fused into o_proj's and down_proj's GEMMs, the residual gradient into the
// norms' backward (as models/gpt_block.h does).
#pragma once
#include "models/layer.h"
#include "models/llama_attention.h"
#include "models/llama_config.h"
#include "models/modules.h"

namespace tetra {

class LlamaBlock : public Layer {
 public:
  LlamaBlock(const LlamaConfig& cfg, int block_index);
  std::string name() const override { return "layers." + std::to_string(block_); }
  std::vector<Param*> params() override;
  Tensor forward(MicroBatchContext& ctx, const Tensor& x) override;
  Tensor backward_input(MicroBatchContext& ctx, const Tensor& dy) override;
  void backward_weight(MicroBatchContext& ctx) override;

 private:
  struct Saved;
  void run_mlp_half(MicroBatchContext& ctx, Saved& s, Tensor* y);  // x2 → y (y null: recompute only)

  LlamaConfig cfg_;
  int block_;
  LlamaAttention attention_;  // input_layernorm, q/k/v, o
  RMSNorm post_norm_;
  Linear gate_up_proj_, down_proj_;
};

}  // namespace tetra
