#include "models/output_projection.h"

#include <functional>

#include "runtime/ops.h"

namespace tetra {

Tensor OutputProjection::forward(MicroBatchContext& ctx, const Tensor& xn, Tensor& x_full) const {
  const int64_t N = ctx.tokens(), C = xn.dim(1);
  x_full = tp && tp->sequence_parallel() ? ctx.activation({N, C}) : xn;
  Tensor logits = ctx.activation({N, weight->value.dim(0)});
  if (tp)
    tp->column_forward(logits, xn, &x_full, weight->value, Tensor());
  else
    ops::linear_forward(logits, x_full, weight->value, Tensor());
  if (!ctx.targets.defined()) {  // generation: the logits themselves (models/generation.h)
    TETRA_CHECK(!tp, "the output layer: logits without targets are for one tensor-parallel rank only");
    ctx.logits = logits;
    ctx.losses = Tensor();
    return Tensor();
  }
  ctx.losses = ctx.fp32({N});
  Tensor targets = ctx.targets.flatten();
  if (tp) {
    loss_parallel(ctx, logits);
  } else if (ctx.training) {
    ops::softmax_cross_entropy(ctx.losses, &logits, logits, targets, ctx.loss_grad_scale);
  } else {
    ops::softmax_cross_entropy(ctx.losses, nullptr, logits, targets, 1.0f);
  }
  return ctx.training ? logits : Tensor();
}

void OutputProjection::loss_parallel(MicroBatchContext& ctx, Tensor& logits) const {
  const int64_t N = logits.dim(0);
  const ops::VocabShard shard = tp->vocab_shard(vocab_size);
  Tensor targets = ctx.targets.flatten();
  Tensor stats = ctx.fp32({3, N});
  ops::cross_entropy_shard_stats(stats, logits, targets, shard);
  Tensor all_stats = ctx.fp32({tp->size(), 3, N});
  tp->all_gather(all_stats, stats, "loss statistics");
  ops::cross_entropy_from_stats(ctx.losses, ctx.training ? &logits : nullptr, logits, targets, shard, all_stats,
                                ctx.training ? ctx.loss_grad_scale : 1.0f);
}

bool OutputProjection::backward_input(MicroBatchContext& ctx, Tensor& dxn, const Tensor& dlogits,
                                      const Tensor& x_full) const {
  const bool weights_done = tp && ctx.weights_follow;
  auto weight_grad = [&] {
    ops::linear_backward_weight(weight->grad, nullptr, dlogits, x_full, /*accumulate=*/true);
  };
  if (tp)
    tp->column_backward_input(dxn, dlogits, weight->value, weights_done ? std::function<void()>(weight_grad) : nullptr);
  else
    ops::linear_backward_input(dxn, dlogits, weight->value);
  return weights_done;
}

void OutputProjection::backward_weight(const Tensor& dlogits, const Tensor& x_full, bool weights_done) const {
  if (!weights_done) ops::linear_backward_weight(weight->grad, nullptr, dlogits, x_full, /*accumulate=*/true);
}

}  // namespace tetra
