#include "models/llama_block.h"

#include <cmath>
#include <functional>
#include <utility>
#include <vector>

#include "runtime/ops.h"

namespace tetra {

// Per micro-batch state of a block. Forward tensors are dropped according to the recompute mode
// and rebuilt at the start of backward_input; the gradients listed last are what W needs.
// R = the block's rows: N, or this rank's N/tp under sequence parallelism; tensor-parallel widths
// are this rank's (F/tp).
struct LlamaBlock::Saved : Activations {
  LlamaAttention::State att;  // x (always kept), h1, rstd1, h1_in, qkv, att, lse; d_x2, d_x2_full, d_qkv for W
  Tensor x2;                // [R, C] after the attention residual, residual dtype
  Tensor h2, rstd2;         // post_attention_layernorm: [R, C], fp32 [R]
  Tensor h2_in;             // [N, C]: gate_up_proj's input (h2, or h2 gathered over tp)
  Tensor gate_up, act;      // [N, 2F] = [gate | up], [N, F] = silu(gate)·up
  // Gradients kept from B for W (activation dtype): of the block output and of gate_up; the block
  // output's gathered to [N, C] (d_out_full; d_out itself without sequence parallelism).
  Tensor d_out, d_gate_up, d_out_full;
  bool weights_done = false;  // B computed the MLP's weight gradients (LlamaBlock::mlp_weight_pieces)
  Fp8Saved gate_up_fp8, down_fp8;  // under an FP8 recipe, what the projections keep for W
};

LlamaBlock::LlamaBlock(const LlamaConfig& cfg, int block_index) : cfg_(cfg), block_(block_index) {
  const std::string p = "model.layers." + std::to_string(block_index) + ".";
  const int64_t C = cfg.d_model, F = cfg.ffn();
  // GPT-2's scaling of the projections into the residual stream, 1/sqrt(2·layers), keeps the
  // stream's variance from growing with depth; Hugging Face's Llama init leaves them at 0.02,
  // torchtitan scales them by depth too.
  const float resid_std = 0.02f / std::sqrt(2.0f * static_cast<float>(cfg.n_layers));
  const int layer = block_index + 1;  // layer 0 is the embedding
  attention_.init(cfg, p, layer);
  post_norm_.init(p + "post_attention_layernorm", C, cfg.norm_eps, layer);
  gate_up_proj_.init(p + "mlp.gate_up_proj", 2 * F, C, false, 0.02f, false, layer);
  gate_up_proj_.weight.parts = {{p + "mlp.gate_proj.weight", 0, F, 1}, {p + "mlp.up_proj.weight", F, F, 1}};
  down_proj_.init(p + "mlp.down_proj", C, F, false, resid_std, false, layer);
  gate_up_proj_.set_fp8(cfg.fp8);
  down_proj_.set_fp8(cfg.fp8);
}

std::vector<Param*> LlamaBlock::params() {
  std::vector<Param*> out;
  attention_.collect(out);
  post_norm_.collect(out);
  gate_up_proj_.collect(out);
  down_proj_.collect(out);
  return out;
}

void LlamaBlock::set_tensor_parallel(TensorParallel* tp, const TensorParallelPlan& plan) {
  attention_.set_tensor_parallel(tp, plan);
  gate_up_proj_.set_tensor_parallel(tp, plan);
  down_proj_.set_tensor_parallel(tp, plan);
}

void LlamaBlock::run_mlp_half(MicroBatchContext& ctx, Saved& s, Tensor* y, bool keep_fp8) {
  const int64_t R = s.x2.dim(0), N = ctx.tokens(), C = cfg_.d_model, F = ffn();
  s.h2 = ctx.activation({R, C});
  s.rstd2 = ctx.fp32({R});
  // Under tensorwise FP8, the norm measures h2's amax for gate_up_proj's cast as it writes h2.
  Tensor* h2_amax = keep_fp8 ? gate_up_proj_.fp8_amax_slot(&s.gate_up_fp8, /*gradient=*/false, ctx.device()) : nullptr;
  post_norm_.forward(s.h2, s.rstd2, s.x2, h2_amax);
  s.gate_up = ctx.activation({N, 2 * F});
  s.h2_in = gate_up_proj_.gathered_input(s.h2, keep_fp8 ? &s.gate_up_fp8 : nullptr);
  gate_up_proj_.forward(s.gate_up, s.h2, &s.h2_in, ops::Activation::None, nullptr, keep_fp8 ? &s.gate_up_fp8 : nullptr);
  s.act = ctx.activation({N, F});
  // Under tensorwise FP8, SwiGLU measures act's amax for down_proj's cast as it writes act.
  Tensor* act_amax = y && keep_fp8 ? down_proj_.fp8_amax_slot(&s.down_fp8, /*gradient=*/false, ctx.device()) : nullptr;
  ops::swiglu_forward(s.act, s.gate_up, act_amax);
  if (!y) return;
  down_proj_.forward_residual(*y, s.act, s.x2, keep_fp8 ? &s.down_fp8 : nullptr);
}

Tensor LlamaBlock::forward(MicroBatchContext& ctx, const Tensor& x) {
  const int64_t R = x.dim(0), C = cfg_.d_model;
  Saved local;
  Saved& s = ctx.training ? ctx.slot<Saved>(index_) : local;
  s.att.x = x;
  // FP8 projections keep xᵀ for W only where their inputs stay until B (a recomputed part recasts).
  s.att.keep_fp8 = ctx.training && recompute_ != Recompute::Full;
  s.x2 = attention_.forward(ctx, s.att);
  Tensor y = ctx.residual({R, C});
  run_mlp_half(ctx, s, &y, ctx.training && recompute_ == Recompute::None);
  if (!ctx.training) return y;
  switch (recompute_) {
    case Recompute::None: break;
    case Recompute::Mlp:  // [N, 2F] and [N, F]: the block's largest tensors, rebuilt from h2 in B
      s.gate_up = Tensor();
      s.act = Tensor();
      break;
    case Recompute::Full: {
      Tensor keep = s.att.x;
      s = Saved();
      s.att.x = keep;
      break;
    }
  }
  return y;
}

Tensor LlamaBlock::backward_input(MicroBatchContext& ctx, const Tensor& dy) {
  Saved& s = ctx.slot<Saved>(index_);
  const int64_t R = s.att.x.dim(0), N = ctx.tokens(), C = cfg_.d_model, F = ffn();
  if (!s.att.qkv.defined()) {  // full recompute
    s.att.keep_fp8 = true;
    s.x2 = attention_.forward(ctx, s.att);
  }
  if (!s.act.defined()) run_mlp_half(ctx, s, nullptr, /*keep_fp8=*/true);

  // MLP: y = x2 + down_proj(swiglu(gate_up_proj(post_attention_layernorm(x2)))). dy is the residual
  // stream's gradient; its GEMMs read it in the activation dtype (the copy the layer above rounded
  // while writing it), and down_proj's FP8 cast the amax the layer above's norm backward measured
  // of that copy (none where dy came from another pipeline stage: the cast measures it then).
  GradCompanions in = ctx.take_grad(dy);
  s.d_out = ctx.in_activation_dtype(dy, in.rounded);
  down_proj_.hand_fp8_amax(&s.down_fp8, /*gradient=*/true, std::move(in.amax));
  Tensor d_act = ctx.activation({N, F});
  s.d_out_full = down_proj_.sequence_sharded() ? ctx.activation({N, C}) : s.d_out;
  down_proj_.backward_input_residual(d_act, s.d_out, &s.d_out_full, nullptr, &s.down_fp8);
  s.d_gate_up = ctx.activation({N, 2 * F});
  ops::swiglu_backward(s.d_gate_up, d_act, s.gate_up,
                       gate_up_proj_.fp8_amax_slot(&s.gate_up_fp8, /*gradient=*/true, ctx.device()));
  s.gate_up = Tensor();  // W uses act and h2_in
  Tensor d_h2 = ctx.activation({R, C});
  // With W right after B, a column-parallel gate_up_proj runs the MLP's weight gradients while its
  // input gradient's reduction moves (parallel/tensor/linear.h); the plain layer keeps B and W apart.
  std::function<void()> mlp_weights;
  if (ctx.weights_follow) mlp_weights = [this, &s] { run_in_order(mlp_weight_pieces(s)); };
  s.weights_done = gate_up_proj_.backward_input(d_h2, s.d_gate_up, mlp_weights, /*accumulate=*/false, &s.gate_up_fp8);
  // o_proj's output gradient, with its amax for o_proj's FP8 cast (attention_.backward_input).
  StreamGradient dx2 = ctx.stream_gradient({R, C}, attention_.takes_output_grad_amax());
  post_norm_.backward_residual(dx2.grad, d_h2, s.x2, s.rstd2, /*dresidual=*/dy, dx2.rounded_output(),
                               dx2.amax_output());

  // Attention: x2 = x + o_proj(attn(rope(qkv_proj(input_layernorm(x))))); d_h2's buffer is free
  // (used at tp = 1, where it is [N, C]).
  Tensor dx = attention_.backward_input(ctx, s.att, dx2, /*scratch=*/d_h2);
  s.x2 = s.rstd2 = Tensor();  // forward tensors W does not need
  return dx;
}

std::array<DevicePiece, 2> LlamaBlock::mlp_weight_pieces(Saved& s) {
  // No biases: down_proj (row-parallel) from the gathered output gradient, gate_up_proj
  // (column-parallel) from its gathered input.
  return {[this, &s] { gate_up_proj_.backward_weight(s.d_gate_up, s.h2_in, Tensor(), &s.gate_up_fp8); },
          [this, &s] { down_proj_.backward_weight(s.d_out_full, s.act, Tensor(), &s.down_fp8); }};
}

void LlamaBlock::backward_weight(MicroBatchContext& ctx) {
  Saved& s = ctx.slot<Saved>(index_);
  // Largest first (gate_up 2·F·C, down F·C, then the attention's o_proj and qkv_proj), one lane each
  // at four lanes; the attention's are none where its backward_input ran them.
  std::vector<DevicePiece> pieces;
  if (!s.weights_done) {
    auto mlp = mlp_weight_pieces(s);
    pieces.assign(mlp.begin(), mlp.end());
  }
  for (DevicePiece& piece : attention_.weight_pieces(s.att)) pieces.push_back(std::move(piece));
  const bool local = attention_.weight_grads_are_local() && gate_up_proj_.weight_grad_is_local() &&
                     down_proj_.weight_grad_is_local();
  run_fanned_out(ctx.device(), local ? weight_grad_ways() : 1, pieces);
  ctx.release(index_);
}

}  // namespace tetra
