// The attention half of a Llama decoder block, pre-RMSNorm (Hugging Face LlamaDecoderLayer):
//   x2 = x + o_proj(attn(rope(qkv_proj(input_layernorm(x)))))
// Activations [N, C] with N = B·T tokens; q/k/v are one fused projection [(H + 2·Hkv)·D, C] whose
// parts carry Hugging Face's q_proj, k_proj, v_proj names; the residual add is fused into o_proj's
// GEMM. A block owns one and keeps its State in the block's slot (models/llama_moe_block.h).
#pragma once
#include "models/layer.h"
#include "models/llama_config.h"
#include "models/modules.h"

namespace tetra {

class LlamaAttention {
 public:
  struct State {
    Tensor x;          // [N, C] block input, residual dtype
    Tensor h1, rstd1;  // input_layernorm: [N, C], fp32 [N]
    Tensor qkv;        // [N, (H + 2·Hkv)·D], q and k rotated
    Tensor att, lse;   // [N, H·D], fp32 [B, H, T]
    // Gradients kept from B for W (activation dtype): of o_proj's output, of qkv (before the rotation).
    Tensor d_x2, d_qkv;
  };

  // `prefix`: "model.layers.N."; `layer`: the owning Layer's index.
  void init(const LlamaConfig& cfg, const std::string& prefix, int layer);
  void collect(std::vector<Param*>& out);
  // x2 [N, C] (residual dtype) from s.x.
  Tensor forward(MicroBatchContext& ctx, State& s) const;
  // dx [N, C] (residual dtype) from d_x2 (the gradient of x2, the residual stream after attention,
  // with its activation-dtype copy); dx's copy is offered to the layer below (models/layer.h).
  // `scratch` ([N, C], may be undefined): a buffer the caller no longer needs, used for the
  // transient gradients.
  Tensor backward_input(MicroBatchContext& ctx, State& s, const StreamGradient& d_x2, Tensor scratch = Tensor());
  void backward_weight(State& s);

 private:
  LlamaConfig cfg_;
  RMSNorm input_norm_;
  Linear qkv_proj_, o_proj_;
};

}  // namespace tetra
