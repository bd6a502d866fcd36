// One Llama decoder block, pre-RMSNorm (Hugging Face LlamaDecoderLayer):
//   x2 = x + o_proj(attn(rope(qkv_proj(input_layernorm(x)))))
//   y  = x2 + down_proj(silu(gate) · up),  [gate | up] = gate_up_proj(post_attention_layernorm(x2))
// Activations are [N, C] with N = B·T tokens. q/k/v are one fused projection of
// [(H + 2·Hkv)·D, C] and gate/up one of [2F, C]; their parts carry Hugging Face's separate names.
// The residual adds are fused into o_proj's and down_proj's GEMMs, the residual gradient into the
// norms' backward (as models/gpt_block.h does).
// Tensor-parallel (models/llama_family.cpp's plan, as models/gpt_block.h): qkv_proj and
// gate_up_proj column-parallel (H/tp query and Hkv/tp key/value heads — or, with tp a multiple of
// Hkv, the one key/value head its query heads read, replicated over tp/Hkv ranks —, F/tp of each of
// gate and up on a rank), o_proj and down_proj row-parallel; with sequence parallelism the norms and
// residual adds on 1/tp of the tokens.
#pragma once
#include <array>

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
  // The projections of attention and MLP in the styles `plan` gives them over `tp`'s group (null:
  // the plain layers).
  void set_tensor_parallel(TensorParallel* tp, const TensorParallelPlan& plan);

 private:
  struct Saved;
  // x2 → y (y null: recompute only); keep_fp8: the FP8 projections keep their part for W.
  void run_mlp_half(MicroBatchContext& ctx, Saved& s, Tensor* y, bool keep_fp8);
  // The MLP's weight gradients (W), its two GEMMs as pieces that may run side by side
  // (runtime/stream_fanout.h): gate_up_proj, down_proj. Run by backward_weight, or, under tensor
  // parallelism when W follows B at once (ctx.weights_follow), in order inside backward_input under
  // the column-parallel input gradient's reduce-scatter (LlamaAttention does the same for its half).
  std::array<DevicePiece, 2> mlp_weight_pieces(Saved& s);

  // This rank's MLP width (all of it without tensor parallelism).
  int64_t ffn() const { return down_proj_.in_features(); }

  LlamaConfig cfg_;
  int block_;
  LlamaAttention attention_;  // input_layernorm, q/k/v, o
  RMSNorm post_norm_;
  Linear gate_up_proj_, down_proj_;
};

}  // namespace tetra
