// The attention half of a Llama decoder block, pre-RMSNorm (Hugging Face LlamaDecoderLayer):
//   x2 = x + o_proj(attn(rope(qkv_proj(input_layernorm(x)))))
// Activations [N, C] with N = B·T tokens; q/k/v are one fused projection [(H + 2·Hkv)·D, C] whose
// parts carry Hugging Face's q_proj, k_proj, v_proj names; the residual add is fused into o_proj's
// GEMM. A block owns one and keeps its State in the block's slot (models/llama_moe_block.h).
// Tensor-parallel (models/llama_family.cpp's plan): qkv_proj column-parallel per head (H/tp query
// and Hkv/tp key/value heads on a rank; with tp a multiple of Hkv, the one key/value head those
// query heads read, replicated over tp/Hkv ranks: LlamaConfig::kv_heads_per_rank), o_proj
// row-parallel; with sequence parallelism x, h1 and x2 hold this rank's R = N/tp rows (else R = N).
#pragma once
#include "models/layer.h"
#include "models/llama_config.h"
#include "models/modules.h"

namespace tetra {

class LlamaAttention {
 public:
  // Widths are this rank's (H/tp query heads, kv_heads_per_rank(tp) key/value heads under tensor
  // parallelism).
  struct State {
    Tensor x;          // [R, C] block input, residual dtype
    Tensor h1, rstd1;  // input_layernorm: [R, C], fp32 [R]
    Tensor h1_in;      // [N, C]: qkv_proj's input (h1, or h1 gathered over tp)
    Tensor qkv;        // [N, (H + 2·Hkv)·D], q and k rotated
    Tensor att, lse;   // [N, H·D], fp32 [B, H, T]
    // Gradients kept from B for W (activation dtype): of o_proj's output (d_x2 [R, C]; d_x2_full,
    // gathered to [N, C] under sequence parallelism, else d_x2), of qkv (before the rotation).
    Tensor d_x2, d_x2_full, d_qkv;
    bool weights_done = false;  // backward_input computed the weight gradients (ctx.weights_follow)
  };

  // `prefix`: "model.layers.N."; `layer`: the owning Layer's index.
  void init(const LlamaConfig& cfg, const std::string& prefix, int layer);
  void collect(std::vector<Param*>& out);
  // The projections in the styles `plan` gives them over `tp`'s group (null: the plain layer).
  void set_tensor_parallel(TensorParallel* tp, const TensorParallelPlan& plan);
  // x2 [R, C] (residual dtype) from s.x.
  Tensor forward(MicroBatchContext& ctx, State& s) const;
  // dx [R, C] (residual dtype) from d_x2 (the gradient of x2, the residual stream after attention,
  // with its activation-dtype copy); dx's copy is offered to the layer below (models/layer.h).
  // `scratch` ([R, C], may be undefined): a buffer the caller no longer needs, used for the transient
  // gradients where their shape is its own (tp = 1). Under tensor parallelism with ctx.weights_follow, the weight
  // gradients run here, under qkv_proj's input-gradient reduce-scatter, and backward_weight does
  // nothing.
  Tensor backward_input(MicroBatchContext& ctx, State& s, const StreamGradient& d_x2, Tensor scratch = Tensor());
  void backward_weight(State& s);

 private:
  void weight_grads(State& s);
  // This rank's query heads (H/tp: o_proj reads H/tp·D features) and key/value heads
  // (kv_heads_per_rank: qkv_proj writes (H/tp + 2·Hkv)·D features).
  int64_t local_heads() const { return o_proj_.in_features() / cfg_.head_dim(); }
  int64_t local_kv_heads() const { return (qkv_proj_.out_features() / cfg_.head_dim() - local_heads()) / 2; }

  LlamaConfig cfg_;
  int layer_ = 0;  // the owning Layer's index: its key/value cache when generating (models/kv_cache.h)
  RMSNorm input_norm_;
  Linear qkv_proj_, o_proj_;
};

}  // namespace tetra
