#include "models/gpt_head.h"

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

GptHead::GptHead(const GptConfig& cfg, Param* wte, int layer_index) : cfg_(cfg) {
  proj_.weight = wte;
  proj_.vocab_size = cfg.vocab_size;
  ln_f_.init("transformer.ln_f", cfg.d_model, cfg.ln_eps, layer_index);
}

std::vector<Param*> GptHead::params() {
  std::vector<Param*> out;
  ln_f_.collect(out);
  return out;  // wte is listed by the embedding, which owns the tied matrix
}

Tensor GptHead::forward(MicroBatchContext& ctx, const Tensor& x) {
  const int64_t R = x.dim(0), C = cfg_.d_model;
  HeadActivations local;
  HeadActivations& a = ctx.training ? ctx.slot<HeadActivations>(index_) : local;
  a.x = x;
  a.lnf = ctx.activation({R, C});
  a.mean = ctx.fp32({R});
  a.rstd = ctx.fp32({R});
  ln_f_.forward(a.lnf, a.mean, a.rstd, x);
  a.dlogits = proj_.forward(ctx, a.lnf, a.lnf_full);  // empty unless training
  return ctx.losses;
}

Tensor GptHead::backward_input(MicroBatchContext& ctx, const Tensor&) {
  auto& a = ctx.slot<HeadActivations>(index_);
  const int64_t R = a.x.dim(0), C = cfg_.d_model;
  Tensor dlnf = ctx.activation({R, C});
  a.weights_done = proj_.backward_input(ctx, dlnf, a.dlogits, a.lnf_full);
  // The last block: its mlp.c_proj bias gradient, the gradient as its GEMMs read it, and the amax
  // its tensorwise FP8 cast takes (plain at tp = 1, as the head is).
  StreamGradient dx = ctx.stream_gradient({R, C}, !proj_.tp && fp8_takes_measured_amax(cfg_.fp8, /*gradient=*/true));
  Tensor dx_sum = ctx.fp32({C});
  ln_f_.backward(dx.grad, dlnf, a.x, a.mean, a.rstd, /*accumulate_dx=*/false, &dx_sum, dx.rounded_output(),
                 dx.amax_output());
  ctx.offer_grad(dx.grad, GradCompanions::of(dx, std::move(dx_sum)));
  a.x = a.mean = a.rstd = Tensor();
  return dx.grad;
}

void GptHead::backward_weight(MicroBatchContext& ctx) {
  auto& a = ctx.slot<HeadActivations>(index_);
  proj_.backward_weight(a.dlogits, a.lnf_full, a.weights_done);
  ctx.release(index_);
}

}  // namespace tetra
