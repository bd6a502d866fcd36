#include "models/gpt_block.h"

#include <cmath>
#include <functional>
#include <utility>

#include "models/kv_cache.h"
#include "runtime/ops.h"

namespace tetra {

// Per micro-batch state of a block. Forward tensors are dropped according to the recompute mode
// and rebuilt at the start of backward_input; the gradients listed last are what W needs.
// R = the block's rows: N, or this rank's N/tp under sequence parallelism. Tensor-parallel widths:
// H/tp heads, so qkv and att hold 3C/tp and C/tp columns, the MLP 4C/tp.
struct GptBlock::Saved : Activations {
  Tensor x;                    // [R, C] block input (always kept), residual dtype
  Tensor ln1, mean1, rstd1;    // [R, C], [R], [R]
  Tensor ln1_in;               // [N, C]: c_attn's input (ln1, or ln1 gathered over tp)
  Tensor qkv;                  // [N, 3C]
  Tensor att, lse;             // [N, C], [B, H, T]
  Tensor x2;                   // [R, C] after the attention residual, residual dtype
  Tensor ln2, mean2, rstd2;    // [R, C], [R], [R]
  Tensor ln2_in;               // [N, C]: c_fc's input
  Tensor fc_pre, fc_act;       // [N, 4C] before / after GELU
  // Gradients kept from B for W (activation dtype; d_mlp_out and d_attn_out are the residual
  // stream's gradients as the GEMMs read them, [R, C]; *_full the same gathered to [N, C] for the
  // row-parallel projections' weight gradients):
  Tensor d_mlp_out, d_mlp_out_full, d_fc_pre, d_attn_out, d_attn_out_full, d_qkv;
  // Their column sums where a LayerNorm backward already took them (fp32 [C]; d_mlp_out_sum comes
  // from the layer above and may be undefined): the two projections' bias gradients.
  Tensor d_mlp_out_sum, d_attn_out_sum;
  bool weights_done = false;  // B computed the weight gradients (GptBlock::mlp_weight_pieces)
  Fp8Saved c_attn_fp8, attn_proj_fp8, c_fc_fp8, mlp_proj_fp8;  // under an FP8 recipe, kept for W
};

GptBlock::GptBlock(const GptConfig& cfg, int block_index) : cfg_(cfg), block_(block_index) {
  const std::string p = "transformer.h." + std::to_string(block_index);
  const int64_t C = cfg.d_model;
  // GPT-2 scales the init of projections into the residual stream by 1/sqrt(2·layers).
  const float resid_std = 0.02f / std::sqrt(2.0f * static_cast<float>(cfg.n_layers));
  const int layer = block_index + 1;  // layer 0 is the embedding
  ln_1_.init(p + ".ln_1", C, cfg.ln_eps, layer);
  c_attn_.init(p + ".attn.c_attn", 3 * C, C, true, 0.02f, true, layer);
  // q | k | v, fused and stored fused (as Hugging Face does); tensor parallelism splits each per head.
  const int64_t D = cfg.head_dim();
  for (Param* w : {&c_attn_.weight, &c_attn_.bias}) w->parts = {{"", 0, C, D}, {"", C, C, D}, {"", 2 * C, C, D}};
  attn_proj_.init(p + ".attn.c_proj", C, C, true, resid_std, true, layer);
  ln_2_.init(p + ".ln_2", C, cfg.ln_eps, layer);
  c_fc_.init(p + ".mlp.c_fc", 4 * C, C, true, 0.02f, true, layer);
  mlp_proj_.init(p + ".mlp.c_proj", C, 4 * C, true, resid_std, true, layer);
  for (Linear* l : {&c_attn_, &attn_proj_, &c_fc_, &mlp_proj_}) l->set_fp8(cfg.fp8);
}

std::vector<Param*> GptBlock::params() {
  std::vector<Param*> out;
  ln_1_.collect(out);
  c_attn_.collect(out);
  attn_proj_.collect(out);
  ln_2_.collect(out);
  c_fc_.collect(out);
  mlp_proj_.collect(out);
  return out;
}

void GptBlock::set_tensor_parallel(TensorParallel* tp, const TensorParallelPlan& plan) {
  for (Linear* l : {&c_attn_, &attn_proj_, &c_fc_, &mlp_proj_}) l->set_tensor_parallel(tp, plan);
}

void GptBlock::run_attention_half(MicroBatchContext& ctx, Saved& s, bool keep_fp8) {
  const int64_t R = s.x.dim(0), N = ctx.tokens(), C = cfg_.d_model, B = ctx.batch, T = ctx.seq_len;
  const int64_t H = local_heads(), HD = H * cfg_.head_dim();
  s.ln1 = ctx.activation({R, C});
  s.mean1 = ctx.fp32({R});
  s.rstd1 = ctx.fp32({R});
  // Under tensorwise FP8, the LayerNorms measure their outputs' amaxes for c_attn's and c_fc's casts.
  ln_1_.forward(s.ln1, s.mean1, s.rstd1, s.x,
                keep_fp8 ? c_attn_.fp8_amax_slot(&s.c_attn_fp8, /*gradient=*/false, ctx.device()) : nullptr);
  s.qkv = ctx.activation({N, 3 * HD});
  s.ln1_in = c_attn_.gathered_input(s.ln1, keep_fp8 ? &s.c_attn_fp8 : nullptr);
  c_attn_.forward(s.qkv, s.ln1, &s.ln1_in, ops::Activation::None, nullptr, keep_fp8 ? &s.c_attn_fp8 : nullptr);
  s.att = ctx.activation({N, HD});
  s.lse = ctx.fp32({B, H, T});
  Tensor qkv3 = s.qkv.view({B, T, 3 * HD}), att3 = s.att.view({B, T, HD});
  causal_attention(ctx, block_, att3, s.lse, qkv3, H, H);
  s.x2 = ctx.residual({R, C});
  attn_proj_.forward_residual(s.x2, s.att, s.x, keep_fp8 ? &s.attn_proj_fp8 : nullptr);
}

void GptBlock::run_mlp_half(MicroBatchContext& ctx, Saved& s, Tensor* y, bool keep_fp8) {
  const int64_t R = s.x.dim(0), N = ctx.tokens(), C = cfg_.d_model, F = c_fc_.out_features();
  s.ln2 = ctx.activation({R, C});
  s.mean2 = ctx.fp32({R});
  s.rstd2 = ctx.fp32({R});
  ln_2_.forward(s.ln2, s.mean2, s.rstd2, s.x2,
                keep_fp8 ? c_fc_.fp8_amax_slot(&s.c_fc_fp8, /*gradient=*/false, ctx.device()) : nullptr);
  s.fc_pre = ctx.activation({N, F});
  s.fc_act = ctx.activation({N, F});
  s.ln2_in = c_fc_.gathered_input(s.ln2, keep_fp8 ? &s.c_fc_fp8 : nullptr);
  // Under tensorwise FP8, c_fc's epilogue measures fc_act's amax for mlp.c_proj's cast as it writes it.
  Tensor* act_amax = y && keep_fp8 ? mlp_proj_.fp8_amax_slot(&s.mlp_proj_fp8, /*gradient=*/false, ctx.device()) : nullptr;
  c_fc_.forward(s.fc_act, s.ln2, &s.ln2_in, ops::Activation::Gelu, &s.fc_pre, keep_fp8 ? &s.c_fc_fp8 : nullptr,
                act_amax);
  if (!y) return;
  mlp_proj_.forward_residual(*y, s.fc_act, s.x2, keep_fp8 ? &s.mlp_proj_fp8 : nullptr);
}

Tensor GptBlock::forward(MicroBatchContext& ctx, const Tensor& x) {
  const int64_t R = x.dim(0), C = cfg_.d_model;
  Saved local;
  Saved& s = ctx.training ? ctx.slot<Saved>(index_) : local;
  s.x = x;
  // FP8 projections keep xᵀ for W only where their inputs stay until B (a recomputed part recasts).
  run_attention_half(ctx, s, ctx.training && recompute_ != Recompute::Full);
  Tensor y = ctx.residual({R, C});
  run_mlp_half(ctx, s, &y, ctx.training && recompute_ == Recompute::None);
  if (!ctx.training) return y;
  switch (recompute_) {
    case Recompute::None: break;
    case Recompute::Mlp:  // the two [N, 4C] tensors are the block's largest; rebuilt from ln_2 in B
      s.fc_pre = Tensor();
      s.fc_act = Tensor();
      break;
    case Recompute::Full: {
      Tensor keep = s.x;
      s = Saved();
      s.x = keep;
      break;
    }
  }
  return y;
}

Tensor GptBlock::backward_input(MicroBatchContext& ctx, const Tensor& dy) {
  Saved& s = ctx.slot<Saved>(index_);
  const int64_t R = s.x.dim(0), N = ctx.tokens(), C = cfg_.d_model, B = ctx.batch, T = ctx.seq_len;
  const int64_t H = local_heads(), HD = H * cfg_.head_dim(), F = c_fc_.out_features();
  if (!s.qkv.defined()) run_attention_half(ctx, s, /*keep_fp8=*/true);  // full recompute
  if (!s.fc_act.defined()) run_mlp_half(ctx, s, nullptr, /*keep_fp8=*/true);

  // MLP: y = x2 + c_proj(gelu(c_fc(ln_2(x2)))). dy is the residual stream's gradient; its GEMMs
  // read it in the activation dtype (the copy the layer above rounded while writing it).
  // mlp.c_proj's FP8 cast takes the amax the layer above's norm backward measured of that copy (none
  // where dy came from another pipeline stage: the cast measures it then).
  GradCompanions in = ctx.take_grad(dy);
  s.d_mlp_out = ctx.in_activation_dtype(dy, in.rounded);
  s.d_mlp_out_sum = std::move(in.column_sum);
  mlp_proj_.hand_fp8_amax(&s.mlp_proj_fp8, /*gradient=*/true, std::move(in.amax));
  Tensor d_fc = ctx.activation({N, F});
  s.d_mlp_out_full = mlp_proj_.sequence_sharded() ? ctx.activation({N, C}) : s.d_mlp_out;
  // The GELU backward in mlp.c_proj's input-gradient GEMM, which measures d_fc's amax for c_fc's cast.
  mlp_proj_.backward_input_residual(d_fc, s.d_mlp_out, &s.d_mlp_out_full, &s.fc_pre, &s.mlp_proj_fp8,
                                    c_fc_.fp8_amax_slot(&s.c_fc_fp8, /*gradient=*/true, ctx.device()));
  s.d_fc_pre = d_fc;
  s.fc_pre = Tensor();  // no longer needed; W uses fc_act and ln2
  Tensor d_ln2 = ctx.activation({R, C});
  // With W right after B, a column-parallel c_fc runs the MLP's weight gradients while its input
  // gradient's reduction moves (parallel/tensor/linear.h); the plain layer keeps B and W apart.
  std::function<void()> mlp_weights;
  if (ctx.weights_follow) mlp_weights = [this, &s] { run_in_order(mlp_weight_pieces(s)); };
  s.weights_done = c_fc_.backward_input(d_ln2, d_fc, mlp_weights, /*accumulate=*/false, &s.c_fc_fp8);
  // attn.c_proj's output gradient, with its amax for attn.c_proj's FP8 cast.
  StreamGradient dx2 = ctx.stream_gradient({R, C}, attn_proj_.takes_fp8_amax(/*gradient=*/true));
  s.d_attn_out_sum = ctx.fp32({C});
  ln_2_.backward_residual(dx2.grad, d_ln2, s.x2, s.mean2, s.rstd2, /*dresidual=*/dy, &s.d_attn_out_sum,
                          dx2.rounded_output(), dx2.amax_output());
  attn_proj_.hand_fp8_amax(&s.attn_proj_fp8, /*gradient=*/true, dx2.amax);

  // Attention: x2 = x + c_proj(attn(c_attn(ln_1(x))))
  s.d_attn_out = dx2.rounded;
  s.d_attn_out_full = attn_proj_.sequence_sharded() ? ctx.activation({N, C}) : dx2.rounded;
  Tensor d_att = ctx.activation_reusing(d_ln2, {N, HD});  // tp = 1: d_ln2's [N, C] buffer
  attn_proj_.backward_input_residual(d_att, dx2.rounded, &s.d_attn_out_full, nullptr, &s.attn_proj_fp8);
  s.d_qkv = ctx.activation({N, 3 * HD});
  Tensor dqkv3 = s.d_qkv.view({B, T, 3 * HD}), datt3 = d_att.view({B, T, HD});
  ops::attention_backward(dqkv3, datt3, s.qkv.view({B, T, 3 * HD}), s.att.view({B, T, HD}), s.lse, H);
  Tensor d_ln1 = ctx.activation_reusing(d_att, {R, C});  // tp = 1: d_att's buffer
  std::function<void()> attention_weights;
  if (s.weights_done) attention_weights = [this, &s] { run_in_order(attention_weight_pieces(s)); };
  c_attn_.backward_input(d_ln1, s.d_qkv, attention_weights, /*accumulate=*/false, &s.c_attn_fp8);
  // The block below: its mlp.c_proj bias gradient, the gradient as its GEMMs read it, and (not under
  // the first block: the embedding reads dx itself) the amax its FP8 cast takes — the blocks share
  // mlp.c_proj's recipe and tensor parallelism.
  StreamGradient dx = ctx.stream_gradient({R, C}, block_ > 0 && mlp_proj_.takes_fp8_amax(/*gradient=*/true));
  Tensor dx_sum = ctx.fp32({C});
  ln_1_.backward_residual(dx.grad, d_ln1, s.x, s.mean1, s.rstd1, /*dresidual=*/dx2.grad, &dx_sum, dx.rounded_output(),
                          dx.amax_output());
  ctx.offer_grad(dx.grad, GradCompanions::of(dx, std::move(dx_sum)));
  // Forward tensors W does not need.
  s.x = s.x2 = s.qkv = s.lse = s.mean1 = s.rstd1 = s.mean2 = s.rstd2 = Tensor();
  return dx.grad;
}

std::array<DevicePiece, 2> GptBlock::mlp_weight_pieces(Saved& s) {
  // c_fc from its (gathered) input; mlp.c_proj from the gathered output gradient, its bias from this
  // rank's rows under sequence parallelism.
  return {[this, &s] {
            mlp_proj_.backward_weight_residual(s.d_mlp_out_full, s.fc_act, s.d_mlp_out, s.d_mlp_out_sum,
                                               &s.mlp_proj_fp8);
          },
          [this, &s] { c_fc_.backward_weight(s.d_fc_pre, s.ln2_in, Tensor(), &s.c_fc_fp8); }};
}

std::array<DevicePiece, 2> GptBlock::attention_weight_pieces(Saved& s) {
  return {[this, &s] {
            attn_proj_.backward_weight_residual(s.d_attn_out_full, s.att, s.d_attn_out, s.d_attn_out_sum,
                                                &s.attn_proj_fp8);
          },
          [this, &s] { c_attn_.backward_weight(s.d_qkv, s.ln1_in, Tensor(), &s.c_attn_fp8); }};
}

void GptBlock::backward_weight(MicroBatchContext& ctx) {
  Saved& s = ctx.slot<Saved>(index_);
  if (!s.weights_done) {
    // Largest first (4, 4, 3 and 1 parts of the layer's 12·C² per token), so that two lanes get
    // mlp.c_proj + c_attn (7) and c_fc + attn.c_proj (5).
    auto mlp = mlp_weight_pieces(s);
    auto attention = attention_weight_pieces(s);
    const DevicePiece pieces[] = {mlp[0], mlp[1], attention[1], attention[0]};
    const bool local = c_attn_.weight_grad_is_local() && attn_proj_.weight_grad_is_local() &&
                       c_fc_.weight_grad_is_local() && mlp_proj_.weight_grad_is_local();
    run_fanned_out(ctx.device(), local ? weight_grad_ways() : 1, pieces);
  }
  ctx.release(index_);
}

}  // namespace tetra
