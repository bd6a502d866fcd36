#include "models/llama_head.h"

#include <functional>

#include "runtime/ops.h"

namespace tetra {

namespace {
struct HeadActivations : Activations {
  Tensor x, hn, rstd;  // [R, C] (residual dtype), [R, C], fp32 [R]: R = N rows, or this rank's sequence shard
  Tensor hn_full;      // [N, C]: the output layer's input (hn, or hn gathered over tp)
  bool weights_done = false;  // backward_input computed the weight gradient
  Tensor dlogits;      // [N, V] (tensor-parallel: [N, V/tp]): gradient of the loss w.r.t. the logits
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
  const int64_t R = x.dim(0), N = ctx.tokens(), C = cfg_.d_model;
  HeadActivations local;
  HeadActivations& a = ctx.training ? ctx.slot<HeadActivations>(index_) : local;
  a.x = x;
  a.hn = ctx.activation({R, C});
  a.rstd = ctx.fp32({R});
  norm_.forward(a.hn, a.rstd, x);
  // Under sequence parallelism the projection's input is gathered (and kept for the weight gradient),
  // in chunks under the GEMM with parallel.tp_comm_overlap (parallel/tp_linear.h).
  a.hn_full = tp_ && tp_->sequence_parallel() ? ctx.activation({N, C}) : a.hn;
  Tensor logits = ctx.activation({N, output_->value.dim(0)});
  if (tp_)
    tp_->column_forward(logits, a.hn, &a.hn_full, output_->value, Tensor());
  else
    ops::linear_forward(logits, a.hn_full, output_->value, Tensor());
  ctx.losses = ctx.fp32({N});
  Tensor targets = ctx.targets.flatten();
  if (tp_) {
    // Loss parallel: every rank's (max, Σ exp, target logit) per row, all-gathered.
    const ops::VocabShard shard = tp_->vocab_shard(cfg_.vocab_size);
    Tensor stats = ctx.fp32({3, N});
    ops::cross_entropy_shard_stats(stats, logits, targets, shard);
    Tensor all_stats = ctx.fp32({tp_->size(), 3, N});
    tp_->all_gather(all_stats, stats, "loss statistics");
    ops::cross_entropy_from_stats(ctx.losses, ctx.training ? &logits : nullptr, logits, targets, shard, all_stats,
                                  ctx.training ? ctx.loss_grad_scale : 1.0f);
  } else if (ctx.training) {
    ops::softmax_cross_entropy(ctx.losses, &logits, logits, targets, ctx.loss_grad_scale);
  } else {
    ops::softmax_cross_entropy(ctx.losses, nullptr, logits, targets, 1.0f);
  }
  if (ctx.training) a.dlogits = logits;
  return ctx.losses;
}

Tensor LlamaHead::backward_input(MicroBatchContext& ctx, const Tensor&) {
  auto& a = ctx.slot<HeadActivations>(index_);
  const int64_t R = a.x.dim(0), C = cfg_.d_model;
  Tensor dhn = ctx.activation({R, C});
  // Tensor-parallel with W right after B: the weight gradient runs under the input gradient's
  // reduce-scatter (parallel/tp_linear.h).
  a.weights_done = tp_ && ctx.weights_follow;
  auto weight_grad = [&] {
    ops::linear_backward_weight(output_->grad, nullptr, a.dlogits, a.hn_full, /*accumulate=*/true);
  };
  if (tp_)
    tp_->column_backward_input(dhn, a.dlogits, output_->value,
                               a.weights_done ? std::function<void()>(weight_grad) : nullptr);
  else
    ops::linear_backward_input(dhn, a.dlogits, output_->value);
  StreamGradient dx = ctx.stream_gradient({R, C});
  norm_.backward(dx.grad, dhn, a.x, a.rstd, dx.rounded_output());
  // The last block reads the gradient in the activation dtype.
  if (dx.rounded_output()) ctx.offer_grad(dx.grad, {Tensor(), dx.rounded});
  a.x = a.rstd = Tensor();
  return dx.grad;
}

void LlamaHead::backward_weight(MicroBatchContext& ctx) {
  auto& a = ctx.slot<HeadActivations>(index_);
  if (!a.weights_done) ops::linear_backward_weight(output_->grad, nullptr, a.dlogits, a.hn_full, /*accumulate=*/true);
  ctx.release(index_);
}

}  // namespace tetra
