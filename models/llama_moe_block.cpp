#include "models/llama_moe_block.h"

#include <cmath>
#include <utility>
#include <vector>

#include "runtime/ops.h"

namespace tetra {

// Per micro-batch state: the attention half's, the residual stream after it and its norm, the MoE
// MLP's. Recompute::Mlp drops the experts' SwiGLU activations (rebuilt in backward from what the
// experts received, without exchanging again); Recompute::Full keeps the block input only and runs
// the whole forward again, exchanges included, at the start of backward.
struct LlamaMoeBlock::Saved : Activations {
  LlamaAttention::State att;
  Tensor x2;          // [N, C] after the attention residual
  Tensor h2, rstd2;   // post_attention_layernorm: [N, C], fp32 [N]
  MoeMlp::State moe;
};

LlamaMoeBlock::LlamaMoeBlock(const LlamaConfig& cfg, int block_index) : cfg_(cfg), block_(block_index) {
  const std::string p = "model.layers." + std::to_string(block_index) + ".";
  const int layer = block_index + 1;  // layer 0 is the embedding
  attention_.init(cfg, p, layer);
  post_norm_.init(p + "post_attention_layernorm", cfg.d_model, cfg.norm_eps, layer);
  const float resid_std = 0.02f / std::sqrt(2.0f * static_cast<float>(cfg.n_layers));
  moe_.init(p + "mlp", block_index, MoeShape::from(cfg.moe, cfg.d_model, cfg.expert_ffn()), layer, resid_std);
  moe_.set_fp8(cfg.fp8);
}

std::vector<Param*> LlamaMoeBlock::params() {
  std::vector<Param*> out;
  attention_.collect(out);
  post_norm_.collect(out);
  moe_.collect(out);
  return out;
}

Tensor LlamaMoeBlock::run_forward_phase(MicroBatchContext& ctx, Saved& s, const Tensor& x, int phase) {
  switch (phase) {
    case 0: {
      const int64_t N = x.dim(0), C = cfg_.d_model;
      s.att.x = x;
      // FP8 projections keep xᵀ for W where the attention's activations stay until B.
      s.att.keep_fp8 = ctx.training && (recompute_ != Recompute::Full || s.moe.recomputing);
      // ... and the shared experts where their activations do (recompute mlp rebuilds them in B).
      s.moe.keep_fp8 = ctx.training && (recompute_ == Recompute::None || s.moe.recomputing);
      s.x2 = attention_.forward(ctx, s.att);
      s.h2 = ctx.activation({N, C});
      s.rstd2 = ctx.fp32({N});
      // Under tensorwise FP8, the norm measures h2's amax for the shared experts' cast as it writes h2,
      // and its rows' for the routed experts' gathered cast.
      post_norm_.forward(s.h2, s.rstd2, s.x2, moe_.input_amax_slot(s.moe, ctx.device()),
                         moe_.input_row_amax_slot(ctx, s.moe, N));
      moe_.forward_route(ctx, s.moe, s.h2, s.x2);
      return Tensor();
    }
    case 1: moe_.forward_dispatch(ctx, s.moe); return Tensor();
    case 2: moe_.forward_experts(ctx, s.moe); return Tensor();
    case 3: return moe_.forward_combine(ctx, s.moe);
  }
  TETRA_FAIL(Internal, name(), ": no forward phase ", phase);
}

Tensor LlamaMoeBlock::forward_phase(MicroBatchContext& ctx, const Tensor& x, int phase) {
  TETRA_CHECK(ctx.training, name(), ": phased forward is for training (evaluation calls forward)");
  Saved& s = ctx.slot<Saved>(index_);
  Tensor y = run_forward_phase(ctx, s, x, phase);
  if (phase < 3) return y;
  switch (recompute_) {
    case Recompute::None: break;
    case Recompute::Mlp: moe_.drop_hidden(s.moe); break;
    case Recompute::Full: {
      Tensor keep = s.att.x, d_prob_sums = s.moe.d_prob_sums;  // the balance loss is not recomputed
      s = Saved();
      s.att.x = keep;
      s.moe.d_prob_sums = d_prob_sums;
      break;
    }
  }
  return y;
}

Tensor LlamaMoeBlock::forward(MicroBatchContext& ctx, const Tensor& x) {
  if (ctx.training) {
    Tensor y;
    for (int p = 0; p < forward_phases(); ++p) y = forward_phase(ctx, x, p);
    return y;
  }
  Saved local;
  Tensor y;
  for (int p = 0; p < forward_phases(); ++p) y = run_forward_phase(ctx, local, x, p);
  return y;
}

Tensor LlamaMoeBlock::backward_phase(MicroBatchContext& ctx, const Tensor& dy, int phase) {
  Saved& s = ctx.slot<Saved>(index_);
  switch (phase) {
    case 0:
      if (!s.x2.defined()) {  // full recompute: the forward again, without counting loads or losses
        Tensor x = s.att.x;
        s.moe.recomputing = true;
        for (int p = 0; p < forward_phases(); ++p) run_forward_phase(ctx, s, x, p);
      }
      // dy's amax and its rows', where the layer above's norm backward measured them, for the shared
      // and the routed experts' casts.
      {
        GradCompanions offered = ctx.take_grad(dy);
        moe_.backward_combine(ctx, s.moe, dy, offered.amax, offered.row_amax);
      }
      return Tensor();
    case 1: moe_.backward_experts(ctx, s.moe); return Tensor();
    case 2: {
      const int64_t N = s.x2.dim(0), C = cfg_.d_model;
      Tensor d_h2 = moe_.backward_route(ctx, s.moe);
      // The stream in the activation dtype (the trainer refuses an fp32 stream with MoE blocks).
      // ... with its amax for o_proj's FP8 cast (attention_.backward_input).
      StreamGradient dx2 = ctx.stream_gradient({N, C}, attention_.takes_output_grad_amax());
      post_norm_.backward_residual(dx2.grad, d_h2, s.x2, s.rstd2, /*dresidual=*/dy, dx2.rounded_output(),
                                   dx2.amax_output());
      Tensor dx = attention_.backward_input(ctx, s.att, dx2, /*scratch=*/d_h2);
      s.x2 = s.rstd2 = Tensor();
      return dx;
    }
  }
  TETRA_FAIL(Internal, name(), ": no backward phase ", phase);
}

Tensor LlamaMoeBlock::backward_input(MicroBatchContext& ctx, const Tensor& dy) {
  Tensor dx;
  for (int p = 0; p < backward_phases(); ++p) dx = backward_phase(ctx, dy, p);
  return dx;
}

void LlamaMoeBlock::backward_weight(MicroBatchContext& ctx) {
  Saved& s = ctx.slot<Saved>(index_);
  // The experts' pieces (largest first), then the attention's.
  std::vector<DevicePiece> pieces = moe_.weight_pieces(s.moe);
  for (DevicePiece& piece : attention_.weight_pieces(s.att)) pieces.push_back(std::move(piece));
  const bool local = moe_.weight_grads_are_local() && attention_.weight_grads_are_local();
  run_fanned_out(ctx.device(), local ? weight_grad_ways() : 1, pieces);
  moe_.weight_pieces_done(s.moe);
  ctx.release(index_);
}

}  // namespace tetra
