#include "models/gpt_head.h"

#include <utility>

#include "runtime/ops.h"

namespace tetra {

namespace {
struct HeadActivations : Activations {
  Tensor x, lnf, mean, rstd;  // [N, C] (residual dtype), [N, C], [N], [N]
  Tensor dlogits;             // [N, V]: gradient of the loss w.r.t. the logits
};
}  // namespace

GptHead::GptHead(const GptConfig& cfg, Param* wte, int layer_index) : cfg_(cfg), wte_(wte) {
  ln_f_.init("transformer.ln_f", cfg.d_model, cfg.ln_eps, layer_index);
}

std::vector<Param*> GptHead::params() {
  std::vector<Param*> out;
  ln_f_.collect(out);
  return out;  // wte is listed by the embedding, which owns the tied matrix
}

Tensor GptHead::forward(MicroBatchContext& ctx, const Tensor& x) {
  const int64_t N = x.dim(0), C = cfg_.d_model, V = cfg_.vocab_size;
  HeadActivations local;
  HeadActivations& a = ctx.training ? ctx.slot<HeadActivations>(index_) : local;
  a.x = x;
  a.lnf = ctx.activation({N, C});
  a.mean = ctx.fp32({N});
  a.rstd = ctx.fp32({N});
  ln_f_.forward(a.lnf, a.mean, a.rstd, x);
  Tensor logits = ctx.activation({N, V});
  ops::linear_forward(logits, a.lnf, wte_->value, Tensor());
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

Tensor GptHead::backward_input(MicroBatchContext& ctx, const Tensor&) {
  auto& a = ctx.slot<HeadActivations>(index_);
  const int64_t N = a.x.dim(0), C = cfg_.d_model;
  Tensor dlnf = ctx.activation({N, C});
  ops::linear_backward_input(dlnf, a.dlogits, wte_->value);
  StreamGradient dx = ctx.stream_gradient({N, C});
  Tensor dx_sum = ctx.fp32({C});
  ln_f_.backward(dx.grad, dlnf, a.x, a.mean, a.rstd, /*accumulate_dx=*/false, &dx_sum, dx.rounded_output());
  // The last block: its mlp.c_proj bias gradient, and the gradient as its GEMMs read it.
  ctx.offer_grad(dx.grad, {std::move(dx_sum), dx.rounded_output() ? dx.rounded : Tensor()});
  a.x = a.mean = a.rstd = Tensor();
  return dx.grad;
}

void GptHead::backward_weight(MicroBatchContext& ctx) {
  auto& a = ctx.slot<HeadActivations>(index_);
  ops::linear_backward_weight(wte_->grad, nullptr, a.dlogits, a.lnf, /*accumulate=*/true);
  ctx.release(index_);
}

}  // namespace tetra
