// The attention half of a Llama decoder block, pre-RMSNorm (Hugging Face LlamaDecoderLayer):
//   x2 = x + o_proj(attn(rope(qkv_proj(input_layernorm(x)))))
// Activations [N, C] with N = B·T tokens; q/k/v are one fused projection [(H + 2·Hkv)·D, C] whose
// parts carry Hugging Face's q_proj, k_proj, v_proj names; the residual add is fused into o_proj's
// GEMM. A block owns one and keeps its State in the block's slot (models/llama_moe_block.h).
// Tensor-parallel (models/llama_family.cpp's plan): qkv_proj column-parallel per head (H/tp query
// and Hkv/tp key/value heads on a rank; with tp a multiple of Hkv, the one key/value head those
// query heads read, replicated over tp/Hkv ranks: LlamaConfig::kv_heads_per_rank), o_proj
// row-parallel; with sequence parallelism x, h1 and x2 hold this rank's R = N/tp rows (else R = N).
// Qwen3 (cfg.qk_norm): q_norm and k_norm, RMSNorms over each head's D channels with one weight [D]
// shared by the heads, normalise q and k between the projection and RoPE:
//   q_h = rope(q_norm(q_h)), k_h = rope(k_norm(k_h)). The heads are copied out of the fused qkv into
// [N·H, D] and [N·Hkv, D] rows (ops::copy_columns), normalised by the RMSNorm op, and copied back;
// the un-normalised copies stay for the backward. Under tensor parallelism the weights are whole on
// every rank and each rank's gradient covers its heads (TpStyle::PerHead: summed over tp).
#pragma once
#include <vector>

#include "models/layer.h"
#include "models/llama_config.h"
#include "models/modules.h"
#include "runtime/stream_fanout.h"

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
    // Qwen3: q and k before their norms ([N, H·D], [N, Hkv·D]) and the norms' fp32 rstd ([N·H], [N·Hkv]).
    Tensor q_in, k_in, q_rstd, k_rstd;
    Tensor att, lse;   // [N, H·D], fp32 [B, H, T]
    // Gradients kept from B for W (activation dtype): of o_proj's output (d_x2 [R, C]; d_x2_full,
    // gathered to [N, C] under sequence parallelism, else d_x2), of qkv (before the rotation).
    Tensor d_x2, d_x2_full, d_qkv;
    bool weights_done = false;  // backward_input computed the weight gradients (ctx.weights_follow)
    // Under an FP8 recipe, what the projections keep for W (models/fp8_linear.h); forward keeps its
    // part only with keep_fp8 (set by the block: a training pass whose activations stay for B).
    Fp8Saved qkv_fp8, o_fp8;
    bool keep_fp8 = false;
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
  // Whether o_proj's FP8 cast takes the amax of its output gradient (d_x2.amax above), measured by
  // the norm backward that writes it (Linear::takes_fp8_amax).
  bool takes_output_grad_amax() const { return o_proj_.takes_fp8_amax(/*gradient=*/true); }
  void backward_weight(State& s);
  // backward_weight's work as pieces that may run side by side (runtime/stream_fanout.h): o_proj's
  // weight gradient, then qkv_proj's; none where backward_input already ran them.
  std::vector<DevicePiece> weight_pieces(State& s);
  // Whether both projections' weight gradients are this rank's work alone (Linear::weight_grad_is_local).
  bool weight_grads_are_local() const { return o_proj_.weight_grad_is_local() && qkv_proj_.weight_grad_is_local(); }

 private:
  // Qwen3's per-head norms of q and k in s.qkv (forward) and their gradient in d_qkv (backward).
  void qk_norm_forward(MicroBatchContext& ctx, State& s) const;
  void qk_norm_backward(MicroBatchContext& ctx, State& s, Tensor& d_qkv);
  // This rank's query heads (H/tp: o_proj reads H/tp·D features) and key/value heads
  // (kv_heads_per_rank: qkv_proj writes (H/tp + 2·Hkv)·D features).
  int64_t local_heads() const { return o_proj_.in_features() / cfg_.head_dim(); }
  int64_t local_kv_heads() const { return (qkv_proj_.out_features() / cfg_.head_dim() - local_heads()) / 2; }

  LlamaConfig cfg_;
  int layer_ = 0;  // the owning Layer's index: its key/value cache when generating (models/kv_cache.h)
  RMSNorm input_norm_, q_norm_, k_norm_;  // q_norm_, k_norm_: Qwen3 only
  Linear qkv_proj_, o_proj_;
};

}  // namespace tetra
