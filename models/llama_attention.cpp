#include "models/llama_attention.h"

#include <cmath>
#include <functional>

#include "models/fp8_grouped.h"
#include "models/kv_cache.h"
#include "runtime/ops.h"

namespace tetra {

void LlamaAttention::init(const LlamaConfig& cfg, const std::string& p, int layer) {
  cfg_ = cfg;
  layer_ = layer;
  const int64_t C = cfg.d_model, H = cfg.n_heads, Hkv = cfg.kv_heads(), D = cfg.head_dim();
  // The projection into the residual stream scaled by 1/sqrt(2·layers), as LlamaBlock does.
  const float resid_std = 0.02f / std::sqrt(2.0f * static_cast<float>(cfg.n_layers));
  input_norm_.init(p + "input_layernorm", C, cfg.norm_eps, layer);
  qkv_proj_.init(p + "self_attn.qkv_proj", cfg.qkv_rows(), C, cfg.qkv_bias, 0.02f, false, layer);
  // The fused rows (and qwen2's bias) stored as Hugging Face's three projections, split per head.
  auto parts = [&](const char* what) {
    const std::string s = std::string(".") + what;
    return std::vector<ParamPart>{{p + "self_attn.q_proj" + s, 0, H * D, D},
                                  {p + "self_attn.k_proj" + s, H * D, Hkv * D, D},
                                  {p + "self_attn.v_proj" + s, (H + Hkv) * D, Hkv * D, D}};
  };
  qkv_proj_.weight.parts = parts("weight");
  if (cfg.qkv_bias) qkv_proj_.bias.parts = parts("bias");
  o_proj_.init(p + "self_attn.o_proj", C, H * D, false, resid_std, false, layer);
  qkv_proj_.set_fp8(cfg.fp8);
  o_proj_.set_fp8(cfg.fp8);
  if (cfg.qk_norm) {
    q_norm_.init(p + "self_attn.q_norm", D, cfg.norm_eps, layer);
    k_norm_.init(p + "self_attn.k_norm", D, cfg.norm_eps, layer);
  }
}

void LlamaAttention::set_tensor_parallel(TensorParallel* tp, const TensorParallelPlan& plan) {
  qkv_proj_.set_tensor_parallel(tp, plan);
  o_proj_.set_tensor_parallel(tp, plan);
}

void LlamaAttention::collect(std::vector<Param*>& out) {
  input_norm_.collect(out);
  qkv_proj_.collect(out);
  if (cfg_.qk_norm) {
    q_norm_.collect(out);
    k_norm_.collect(out);
  }
  o_proj_.collect(out);
}

Tensor LlamaAttention::forward(MicroBatchContext& ctx, State& s) const {
  const int64_t R = s.x.dim(0), N = qkv_proj_.full_rows(R), C = cfg_.d_model, B = ctx.batch, T = ctx.seq_len;
  const int64_t H = local_heads(), Hkv = local_kv_heads(), Q = qkv_proj_.out_features(), HD = H * cfg_.head_dim();
  s.h1 = ctx.activation({R, C});
  s.rstd1 = ctx.fp32({R});
  // Under tensorwise FP8, the norm measures h1's amax for qkv_proj's cast as it writes h1.
  input_norm_.forward(s.h1, s.rstd1, s.x,
                      s.keep_fp8 ? qkv_proj_.fp8_amax_slot(&s.qkv_fp8, /*gradient=*/false, ctx.device()) : nullptr);
  s.qkv = ctx.activation({N, Q});
  s.h1_in = qkv_proj_.gathered_input(s.h1, s.keep_fp8 ? &s.qkv_fp8 : nullptr);
  qkv_proj_.forward(s.qkv, s.h1, &s.h1_in, ops::Activation::None, nullptr, s.keep_fp8 ? &s.qkv_fp8 : nullptr);
  if (cfg_.qk_norm) qk_norm_forward(ctx, s);
  Tensor qkv3 = s.qkv.view({B, T, Q});
  ops::rope_forward(qkv3, H, Hkv, cfg_.rope(), ctx.position);
  s.att = ctx.activation({N, HD});
  s.lse = ctx.fp32({B, H, T});
  Tensor att3 = s.att.view({B, T, HD});
  causal_attention(ctx, layer_, att3, s.lse, qkv3, H, Hkv);
  Tensor x2 = ctx.residual({R, C});
  o_proj_.forward_residual(x2, s.att, s.x, s.keep_fp8 ? &s.o_fp8 : nullptr);
  return x2;
}

Tensor LlamaAttention::backward_input(MicroBatchContext& ctx, State& s, const StreamGradient& dx2, Tensor scratch) {
  const int64_t R = s.x.dim(0), N = o_proj_.full_rows(R), C = cfg_.d_model, B = ctx.batch, T = ctx.seq_len;
  const int64_t H = local_heads(), Hkv = local_kv_heads(), Q = qkv_proj_.out_features(), HD = H * cfg_.head_dim();
  s.d_x2 = dx2.rounded;  // the stream gradient as o_proj's GEMMs read it
  s.d_x2_full = o_proj_.sequence_sharded() ? ctx.activation({N, C}) : s.d_x2;
  o_proj_.hand_fp8_amax(&s.o_fp8, /*gradient=*/true, dx2.amax);  // the post-attention norm's, if it measured one
  // tp = 1 and H·D = C: one [N, C] buffer for the gradients of att and then h1.
  Tensor d_att = ctx.activation_reusing(scratch, {N, HD});
  o_proj_.backward_input_residual(d_att, s.d_x2, &s.d_x2_full, nullptr, &s.o_fp8);
  s.d_qkv = ctx.activation({N, Q});
  Tensor dqkv3 = s.d_qkv.view({B, T, Q});
  ops::attention_backward(dqkv3, d_att.view({B, T, HD}), s.qkv.view({B, T, Q}), s.att.view({B, T, HD}), s.lse, H,
                          Hkv);
  ops::rope_backward(dqkv3, H, Hkv, cfg_.rope());  // the gradient of the projection's output
  if (cfg_.qk_norm) qk_norm_backward(ctx, s, s.d_qkv);  // ... or of the norms' output, taken through them
  Tensor d_h1 = ctx.activation_reusing(d_att, {R, C});
  s.weights_done = qkv_proj_.backward_input(
      d_h1, s.d_qkv, ctx.weights_follow ? std::function<void()>([this, &s] { backward_weight(s); }) : nullptr,
      /*accumulate=*/false, &s.qkv_fp8);
  // What the block below's GEMMs read, and (not in the first block: the embedding reads dx itself) the
  // amax its down_proj's FP8 cast takes — the blocks share o_proj's recipe and tensor parallelism.
  // A MoE block below casts its routed experts' output gradient token by token: the rows' amaxes too.
  const bool below_moe = layer_ > 1 && cfg_.moe_block(layer_ - 2) && fp8_grouped::casts_ahead(cfg_.fp8);
  StreamGradient dx = ctx.stream_gradient({R, C}, layer_ > 1 && takes_output_grad_amax(), below_moe);
  input_norm_.backward_residual(dx.grad, d_h1, s.x, s.rstd1, /*dresidual=*/dx2.grad, dx.rounded_output(),
                                dx.amax_output(), dx.row_amax_output());
  ctx.offer_grad(dx.grad, GradCompanions::of(dx));
  s.x = s.qkv = s.lse = s.rstd1 = s.q_in = s.k_in = s.q_rstd = s.k_rstd = Tensor();  // W needs att and h1_in
  return dx.grad;
}

void LlamaAttention::qk_norm_forward(MicroBatchContext& ctx, State& s) const {
  const int64_t N = s.qkv.dim(0), D = cfg_.head_dim();
  const int64_t heads[2] = {local_heads(), local_kv_heads()}, first_col[2] = {0, local_heads() * D};
  Tensor* in[2] = {&s.q_in, &s.k_in};
  Tensor* rstd[2] = {&s.q_rstd, &s.k_rstd};
  const RMSNorm* norm[2] = {&q_norm_, &k_norm_};
  for (int i = 0; i < 2; ++i) {  // q, then k: [N, heads·D] out of qkv, normalised as [N·heads, D] rows
    const int64_t W = heads[i] * D;
    *in[i] = ctx.activation({N, W});
    ops::copy_columns(*in[i], 0, s.qkv, first_col[i], W);
    *rstd[i] = ctx.fp32({N * heads[i]});
    Tensor normed = ctx.activation({N * heads[i], D});
    norm[i]->forward(normed, *rstd[i], in[i]->view({N * heads[i], D}));
    ops::copy_columns(s.qkv, first_col[i], normed.view({N, W}), 0, W);
  }
}

void LlamaAttention::qk_norm_backward(MicroBatchContext& ctx, State& s, Tensor& d_qkv) {
  const int64_t N = d_qkv.dim(0), D = cfg_.head_dim();
  const int64_t heads[2] = {local_heads(), local_kv_heads()}, first_col[2] = {0, local_heads() * D};
  const Tensor* in[2] = {&s.q_in, &s.k_in};
  const Tensor* rstd[2] = {&s.q_rstd, &s.k_rstd};
  RMSNorm* norm[2] = {&q_norm_, &k_norm_};
  for (int i = 0; i < 2; ++i) {  // the gradient of the normed heads, taken through the norm in place
    const int64_t W = heads[i] * D;
    Tensor d = ctx.activation({N, W});
    ops::copy_columns(d, 0, d_qkv, first_col[i], W);
    Tensor rows = d.view({N * heads[i], D});
    norm[i]->backward(rows, rows, in[i]->view({N * heads[i], D}), *rstd[i]);
    ops::copy_columns(d_qkv, first_col[i], d, 0, W);
  }
}

void LlamaAttention::backward_weight(State& s) { run_in_order(weight_pieces(s)); }

std::vector<DevicePiece> LlamaAttention::weight_pieces(State& s) {
  if (s.weights_done) return {};
  // o_proj (row-parallel, no bias) from the gathered output gradient, qkv_proj (column-parallel;
  // qwen2's bias from this rank's columns of d_qkv over all N rows) from its gathered input.
  return {[this, &s] { o_proj_.backward_weight(s.d_x2_full, s.att, Tensor(), &s.o_fp8); },
          [this, &s] { qkv_proj_.backward_weight(s.d_qkv, s.h1_in, Tensor(), &s.qkv_fp8); }};
}

}  // namespace tetra
