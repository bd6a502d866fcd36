// One GPT-2 transformer block, pre-LayerNorm:
//   x2 = x + c_proj(attn(c_attn(ln_1(x))))
//   y  = x2 + mlp.c_proj(gelu(mlp.c_fc(ln_2(x2))))
// Activations are [N, C] with N = B·T tokens.
// Tensor-parallel (Megatron-LM's split, models/gpt_family.cpp's plan): c_attn and c_fc are
// column-parallel (c_attn per head of each of q, k, v: this rank computes H/tp heads), the two c_proj
// row-parallel. With sequence parallelism the block's input, output, LayerNorms and residual adds
// hold this rank's N/tp rows; the column-parallel inputs are all-gathered and the row-parallel
// outputs reduce-scattered (parallel/tensor/tensor_parallel.h). Without it every rank holds all N rows and
// the row-parallel outputs (and column-parallel input gradients) are all-reduced.
#pragma once
#include <array>

#include "models/gpt_config.h"
#include "models/layer.h"
#include "models/modules.h"
#include "runtime/stream_fanout.h"

namespace tetra {

class GptBlock : public Layer {
 public:
  GptBlock(const GptConfig& cfg, int block_index);
  std::string name() const override { return "h." + std::to_string(block_); }
  std::vector<Param*> params() override;
  Tensor forward(MicroBatchContext& ctx, const Tensor& x) override;
  Tensor backward_input(MicroBatchContext& ctx, const Tensor& dy) override;
  void backward_weight(MicroBatchContext& ctx) override;
  // The projections in the styles `plan` gives them over `tp`'s group (null: plain).
  void set_tensor_parallel(TensorParallel* tp, const TensorParallelPlan& plan);

 private:
  struct Saved;
  // keep_fp8: the FP8 projections keep their part for W (their inputs stay until B).
  void run_attention_half(MicroBatchContext& ctx, Saved& s, bool keep_fp8);  // x → x2
  void run_mlp_half(MicroBatchContext& ctx, Saved& s, Tensor* y, bool keep_fp8);  // x2 → y (y null: recompute only)
  // The weight gradients of each half (W), its two GEMMs as pieces that may run side by side
  // (runtime/stream_fanout.h): mlp.c_proj then c_fc; attn.c_proj then c_attn. Run by
  // backward_weight, or, under tensor parallelism when W follows B at once (ctx.weights_follow), in
  // order inside backward_input under the column-parallel input gradient's reduce-scatter.
  std::array<DevicePiece, 2> mlp_weight_pieces(Saved& s);
  std::array<DevicePiece, 2> attention_weight_pieces(Saved& s);

  // Heads this rank computes (n_heads, or n_heads / tp).
  int64_t local_heads() const { return c_attn_.weight.local_shape[0] / (3 * cfg_.head_dim()); }

  GptConfig cfg_;
  int block_;
  LayerNorm ln_1_, ln_2_;
  Linear c_attn_, attn_proj_, c_fc_, mlp_proj_;
};

}  // namespace tetra
