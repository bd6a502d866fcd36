#include "models/llama_head.h"

#include "models/fp8_grouped.h"
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
  proj_.vocab_size = cfg.vocab_size;
  if (tied) {
    proj_.weight = tied;
  } else {
    lm_head_.name = "lm_head.weight";
    lm_head_.full_shape = lm_head_.local_shape = {cfg.vocab_size, cfg.d_model};
    lm_head_.init_std = 0.02f;
    lm_head_.layer_index = layer_index;
    proj_.weight = &lm_head_;
  }
}

std::vector<Param*> LlamaHead::params() {
  std::vector<Param*> out;
  norm_.collect(out);
  if (proj_.weight == &lm_head_) out.push_back(&lm_head_);  // a tied matrix is listed by the embedding
  return out;
}

Tensor LlamaHead::forward(MicroBatchContext& ctx, const Tensor& x) {
  const int64_t R = x.dim(0), C = cfg_.d_model;
  HeadActivations local;
  HeadActivations& a = ctx.training ? ctx.slot<HeadActivations>(index_) : local;
  a.x = x;
  a.hn = ctx.activation({R, C});
  a.rstd = ctx.fp32({R});
  norm_.forward(a.hn, a.rstd, x);
  a.dlogits = proj_.forward(ctx, a.hn, a.hn_full);  // empty unless training
  return ctx.losses;
}

Tensor LlamaHead::backward_input(MicroBatchContext& ctx, const Tensor&) {
  auto& a = ctx.slot<HeadActivations>(index_);
  const int64_t R = a.x.dim(0), C = cfg_.d_model;
  Tensor dhn = ctx.activation({R, C});
  a.weights_done = proj_.backward_input(ctx, dhn, a.dlogits, a.hn_full);
  // The last block reads the gradient in the activation dtype, and its down_proj's tensorwise FP8
  // cast (plain at tp = 1, as the head is) the amax measured here.
  StreamGradient dx = ctx.stream_gradient({R, C}, !proj_.tp && fp8_takes_measured_amax(cfg_.fp8, /*gradient=*/true),
                                          cfg_.moe_block(cfg_.n_layers - 1) && fp8_grouped::casts_ahead(cfg_.fp8));
  norm_.backward(dx.grad, dhn, a.x, a.rstd, dx.rounded_output(), dx.amax_output(), dx.row_amax_output());
  ctx.offer_grad(dx.grad, GradCompanions::of(dx));
  a.x = a.rstd = Tensor();
  return dx.grad;
}

void LlamaHead::backward_weight(MicroBatchContext& ctx) {
  auto& a = ctx.slot<HeadActivations>(index_);
  proj_.backward_weight(a.dlogits, a.hn_full, a.weights_done);
  ctx.release(index_);
}

}  // namespace tetra
