#include "models/llama_attention.h"

#include <cmath>
#include <functional>

#include "runtime/ops.h"

namespace tetra {

void LlamaAttention::init(const LlamaConfig& cfg, const std::string& p, int layer) {
  cfg_ = cfg;
  const int64_t C = cfg.d_model, H = cfg.n_heads, Hkv = cfg.kv_heads(), D = cfg.head_dim();
  // The projection into the residual stream scaled by 1/sqrt(2·layers), as LlamaBlock does.
  const float resid_std = 0.02f / std::sqrt(2.0f * static_cast<float>(cfg.n_layers));
  input_norm_.init(p + "input_layernorm", C, cfg.norm_eps, layer);
  qkv_proj_.init(p + "self_attn.qkv_proj", cfg.qkv_rows(), C, false, 0.02f, false, layer);
  qkv_proj_.weight.parts = {{p + "self_attn.q_proj.weight", 0, H * D, D},
                            {p + "self_attn.k_proj.weight", H * D, Hkv * D, D},
                            {p + "self_attn.v_proj.weight", (H + Hkv) * D, Hkv * D, D}};
  o_proj_.init(p + "self_attn.o_proj", C, H * D, false, resid_std, false, layer);
}

void LlamaAttention::set_tensor_parallel(TensorParallel* tp, const TensorParallelPlan& plan) {
  qkv_proj_.set_tensor_parallel(tp, plan);
  o_proj_.set_tensor_parallel(tp, plan);
}

void LlamaAttention::collect(std::vector<Param*>& out) {
  input_norm_.collect(out);
  qkv_proj_.collect(out);
  o_proj_.collect(out);
}

Tensor LlamaAttention::forward(MicroBatchContext& ctx, State& s) const {
  const int64_t R = s.x.dim(0), N = qkv_proj_.full_rows(R), C = cfg_.d_model, B = ctx.batch, T = ctx.seq_len;
  const int64_t H = local_heads(), Hkv = local_kv_heads(), Q = qkv_proj_.out_features(), HD = H * cfg_.head_dim();
  s.h1 = ctx.activation({R, C});
  s.rstd1 = ctx.fp32({R});
  input_norm_.forward(s.h1, s.rstd1, s.x);
  s.qkv = ctx.activation({N, Q});
  s.h1_in = qkv_proj_.sequence_sharded() ? ctx.activation({N, C}) : s.h1;
  qkv_proj_.forward(s.qkv, s.h1, &s.h1_in);
  Tensor qkv3 = s.qkv.view({B, T, Q});
  ops::rope_forward(qkv3, H, Hkv, cfg_.rope());
  s.att = ctx.activation({N, HD});
  s.lse = ctx.fp32({B, H, T});
  Tensor att3 = s.att.view({B, T, HD});
  ops::attention_forward(att3, s.lse, qkv3, H, Hkv);
  Tensor x2 = ctx.residual({R, C});
  o_proj_.forward_residual(x2, s.att, s.x);
  return x2;
}

Tensor LlamaAttention::backward_input(MicroBatchContext& ctx, State& s, const StreamGradient& dx2, Tensor scratch) {
  const int64_t R = s.x.dim(0), N = o_proj_.full_rows(R), C = cfg_.d_model, B = ctx.batch, T = ctx.seq_len;
  const int64_t H = local_heads(), Hkv = local_kv_heads(), Q = qkv_proj_.out_features(), HD = H * cfg_.head_dim();
  TETRA_CHECK(cfg_.n_heads * cfg_.head_dim() == C, "LlamaAttention: H·D = ", cfg_.n_heads * cfg_.head_dim(),
              " must equal d_model = ", C);
  s.d_x2 = dx2.rounded;  // the stream gradient as o_proj's GEMMs read it
  s.d_x2_full = o_proj_.sequence_sharded() ? ctx.activation({N, C}) : s.d_x2;
  // tp = 1: one [N, C] buffer for the gradients of att and then h1 (H·D = C).
  Tensor d_att = ctx.activation_reusing(scratch, {N, HD});
  o_proj_.backward_input_residual(d_att, s.d_x2, &s.d_x2_full);
  s.d_qkv = ctx.activation({N, Q});
  Tensor dqkv3 = s.d_qkv.view({B, T, Q});
  ops::attention_backward(dqkv3, d_att.view({B, T, HD}), s.qkv.view({B, T, Q}), s.att.view({B, T, HD}), s.lse, H,
                          Hkv);
  ops::rope_backward(dqkv3, H, Hkv, cfg_.rope());  // the gradient of the projection's output
  Tensor d_h1 = ctx.activation_reusing(d_att, {R, C});
  s.weights_done = qkv_proj_.backward_input(
      d_h1, s.d_qkv, ctx.weights_follow ? std::function<void()>([this, &s] { weight_grads(s); }) : nullptr);
  StreamGradient dx = ctx.stream_gradient({R, C});
  input_norm_.backward_residual(dx.grad, d_h1, s.x, s.rstd1, /*dresidual=*/dx2.grad, dx.rounded_output());
  if (dx.rounded_output()) ctx.offer_grad(dx.grad, {Tensor(), dx.rounded});  // what the block below's GEMMs read
  s.x = s.qkv = s.lse = s.rstd1 = Tensor();  // W needs att and h1_in
  return dx.grad;
}

void LlamaAttention::backward_weight(State& s) {
  if (!s.weights_done) weight_grads(s);
}

void LlamaAttention::weight_grads(State& s) {
  // No biases: o_proj (row-parallel) from the gathered output gradient, qkv_proj (column-parallel)
  // from its gathered input.
  o_proj_.backward_weight(s.d_x2_full, s.att);
  qkv_proj_.backward_weight(s.d_qkv, s.h1_in);
}

}  // namespace tetra
