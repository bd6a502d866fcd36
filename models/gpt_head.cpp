#include "models/gpt_head.h"

#include <functional>
#include <utility>

#include "runtime/ops.h"

namespace tetra {

namespace {
struct HeadActivations : Activations {
  Tensor x, lnf, mean, rstd;  // [R, C] (residual dtype), [R, C], [R], [R]: R = N rows, or this rank's shard
  Tensor lnf_full;            // [N, C]: the LM projection's input (lnf, or it gathered over tp)
  bool weights_done = false;  // backward_input computed the weight gradient
  Tensor dlogits;             // [N, V] (tensor-parallel: [N, V/tp]): gradient of the loss w.r.t. the logits
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
  const int64_t R = x.dim(0), N = ctx.tokens(), C = cfg_.d_model;
  HeadActivations local;
  HeadActivations& a = ctx.training ? ctx.slot<HeadActivations>(index_) : local;
  a.x = x;
  a.lnf = ctx.activation({R, C});
  a.mean = ctx.fp32({R});
  a.rstd = ctx.fp32({R});
  ln_f_.forward(a.lnf, a.mean, a.rstd, x);
  // Under sequence parallelism the projection's input is gathered (and kept for the weight gradient),
  // in chunks under the GEMM with parallel.tp_comm_overlap (parallel/tp_linear.h).
  a.lnf_full = tp_ && tp_->sequence_parallel() ? ctx.activation({N, C}) : a.lnf;
  Tensor logits = ctx.activation({N, wte_->value.dim(0)});
  if (tp_)
    tp_->column_forward(logits, a.lnf, &a.lnf_full, wte_->value, Tensor());
  else
    ops::linear_forward(logits, a.lnf_full, wte_->value, Tensor());
  ctx.losses = ctx.fp32({N});
  Tensor targets = ctx.targets.flatten();
  if (tp_) {
    tp_loss(ctx, logits);
  } else if (ctx.training) {
    ops::softmax_cross_entropy(ctx.losses, &logits, logits, targets, ctx.loss_grad_scale);
  } else {
    ops::softmax_cross_entropy(ctx.losses, nullptr, logits, targets, 1.0f);
  }
  if (ctx.training) a.dlogits = logits;
  return ctx.losses;
}

// Loss parallel: each rank's (max, Σ exp, target logit) per row, all-gathered, give every rank the
// same losses and its own columns of the logits' gradient (in place of the logits when training).
void GptHead::tp_loss(MicroBatchContext& ctx, Tensor& logits) {
  const int64_t N = logits.dim(0);
  const ops::VocabShard shard = tp_->vocab_shard(cfg_.vocab_size);
  Tensor targets = ctx.targets.flatten();
  Tensor stats = ctx.fp32({3, N});
  ops::cross_entropy_shard_stats(stats, logits, targets, shard);
  Tensor all_stats = ctx.fp32({tp_->size(), 3, N});
  tp_->all_gather(all_stats, stats, "loss statistics");
  ops::cross_entropy_from_stats(ctx.losses, ctx.training ? &logits : nullptr, logits, targets, shard, all_stats,
                                ctx.training ? ctx.loss_grad_scale : 1.0f);
}

Tensor GptHead::backward_input(MicroBatchContext& ctx, const Tensor&) {
  auto& a = ctx.slot<HeadActivations>(index_);
  const int64_t R = a.x.dim(0), C = cfg_.d_model;
  Tensor dlnf = ctx.activation({R, C});
  // Tensor-parallel with W right after B: the weight gradient runs under the input gradient's
  // reduce-scatter (parallel/tp_linear.h).
  a.weights_done = tp_ && ctx.weights_follow;
  auto weight_grad = [&] {
    ops::linear_backward_weight(wte_->grad, nullptr, a.dlogits, a.lnf_full, /*accumulate=*/true);
  };
  if (tp_)
    tp_->column_backward_input(dlnf, a.dlogits, wte_->value,
                               a.weights_done ? std::function<void()>(weight_grad) : nullptr);
  else
    ops::linear_backward_input(dlnf, a.dlogits, wte_->value);
  StreamGradient dx = ctx.stream_gradient({R, C});
  Tensor dx_sum = ctx.fp32({C});
  ln_f_.backward(dx.grad, dlnf, a.x, a.mean, a.rstd, /*accumulate_dx=*/false, &dx_sum, dx.rounded_output());
  // The last block: its mlp.c_proj bias gradient, and the gradient as its GEMMs read it.
  ctx.offer_grad(dx.grad, {std::move(dx_sum), dx.rounded_output() ? dx.rounded : Tensor()});
  a.x = a.mean = a.rstd = Tensor();
  return dx.grad;
}

void GptHead::backward_weight(MicroBatchContext& ctx) {
  auto& a = ctx.slot<HeadActivations>(index_);
  if (!a.weights_done) ops::linear_backward_weight(wte_->grad, nullptr, a.dlogits, a.lnf_full, /*accumulate=*/true);
  ctx.release(index_);
}

}  // namespace tetra
