#include "models/llama_head.h"

#include "runtime/ops.h"

namespace tetra {

namespace {
struct HeadActivations : Activations {
  Tensor x, hn, rstd;  // [N, C] (residual dtype), [N, C], fp32 [N]
  Tensor dlogits;      // [N, V]: gradient of the loss w.r.t. the logits
};
}  // namespace

LlamaHead::LlamaHead(const LlamaConfig& cfg, Param* tied, int layer_index) : cfg_(cfg) {
  norm_.init("model.norm", cfg.d_model, cfg.norm_eps, layer_index);
  if (tied) {
    output_ = tied;
  } else {
    lm_head_.name = "lm_head.weight";
    lm_head_.full_shape = lm_head_.local_shape = {cfg.vocab_size, cfg.d_model};
    lm_head_.init_std = 0.02f;
    lm_head_.layer_index = layer_index;
    output_ = &lm_head_;
  }
}

std::vector<Param*> LlamaHead::params() {
  std::vector<Param*> out;
  norm_.collect(out);
  if (output_ == &lm_head_) out.push_back(&lm_head_);  // a tied matrix is listed by the embedding
  return out;
}

Tensor LlamaHead::forward(MicroBatchContext& ctx, const Tensor& x) {
  const int64_t N = x.dim(0), C = cfg_.d_model, V = cfg_.vocab_size;
  HeadActivations local;
  HeadActivations& a = ctx.training ? ctx.slot<HeadActivations>(index_) : local;
  a.x = x;
  a.hn = ctx.activation({N, C});
  a.rstd = ctx.fp32({N});
  norm_.forward(a.hn, a.rstd, x);
  Tensor logits = ctx.activation({N, V});
  ops::linear_forward(logits, a.hn, output_->value, Tensor());
  ctx.losses = ctx.fp32({N});
  Tensor targets = ctx.targets.flatten();
  if (ctx.training) {
    ops::softmax_cross_entropy(ctx.losses, &logits, logits, targets, ctx.loss_grad_scale);
    a.dlogits = logits;
  } else {
    ops::softmax_cross_entropy(ctx.losses, nullptr, logits, targets, 1.0f);
  }
  return ctx.losses;
}

Tensor LlamaHead::backward_input(MicroBatchContext& ctx, const Tensor&) {
  auto& a = ctx.slot<HeadActivations>(index_);
  const int64_t N = a.x.dim(0), C = cfg_.d_model;
  Tensor dhn = ctx.activation({N, C});
  ops::linear_backward_input(dhn, a.dlogits, output_->value);
  StreamGradient dx = ctx.stream_gradient({N, C});
  norm_.backward(dx.grad, dhn, a.x, a.rstd, dx.rounded_output());
  // The last block reads the gradient in the activation dtype.
  if (dx.rounded_output()) ctx.offer_grad(dx.grad, {Tensor(), dx.rounded});
  a.x = a.rstd = Tensor();
  return dx.grad;
}

void LlamaHead::backward_weight(MicroBatchContext& ctx) {
  auto& a = ctx.slot<HeadActivations>(index_);
  ops::linear_backward_weight(output_->grad, nullptr, a.dlogits, a.hn, /*accumulate=*/true);
  ctx.release(index_);
}

}  // namespace tetra
